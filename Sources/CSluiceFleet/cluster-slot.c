/*
 * cluster-slot.c — Redis Cluster's hash slot of a key: CRC16 (XMODEM) of its
 * hash tag, modulo 16384 (cluster-slot.h).
 */
#include <string.h>

#include "cluster-slot.h"

uint16_t sluice__cluster_crc16(const void *p, size_t len) {
    const unsigned char *b = p;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(b[i] << 8);
        for (int bit = 0; bit < 8; bit++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned sluice__cluster_keyslot(const char *key, size_t len) {
    const char *open = len ? memchr(key, '{', len) : NULL;
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        /* "{}" (nothing between) is no tag: the whole key is hashed */
        if (close && close > key + from) {
            key += from;
            len = (size_t)(close - key);
        }
    }
    return sluice__cluster_crc16(key, len) & (SLUICE__CLUSTER_SLOTS - 1);
}
