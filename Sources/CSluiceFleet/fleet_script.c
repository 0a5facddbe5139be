/*
 * fleet_script.c — the Lua script that makes one fleet decision in Redis, and
 * SHA-1 (to name it for EVALSHA without waiting for SCRIPT LOAD).
 */
#include <stdint.h>
#include <string.h>

#include "fleet-internal.h"

/* The script, one C string literal per Lua line. */
static const char script[] =
    "-- sluice fleet: one GCRA rate decision, atomically.\n"
    "-- KEYS[1] the key. ARGV: 1 op ('C' call, 'Q' quota peek), 2 now in ns ('' = Redis TIME),\n"
    "-- 3 limit, 4 cost*per, 5 burst*per, 6 extra expiry in ms, 7 the end of the clock (2^64-1 ns) * limit.\n"
    "-- Times are ns scaled by the policy's limit (T = per/limit becomes the integer per),\n"
    "-- kept as decimal strings and computed exactly with base-1e7 limbs: Lua numbers are\n"
    "-- doubles, exact only to 2^53. Stored value: the key's TAT scaled by limit.\n"
    "-- Replies: 'C' -> {1, t, newTAT} admitted or {0, t, TAT} dropped; 'Q' -> {t, TAT},\n"
    "-- where TAT is max(stored, t*limit).\n"
    "if redis.replicate_commands then pcall(redis.replicate_commands) end\n"
    "local BASE = 10000000\n"
    "local function num(s)\n"
    "  if type(s) ~= 'string' or #s == 0 or #s > 60 or string.find(s, '%D') then return nil end\n"
    "  local a, i = {}, #s\n"
    "  while i >= 1 do\n"
    "    local j = i - 6\n"
    "    if j < 1 then j = 1 end\n"
    "    a[#a + 1] = tonumber(string.sub(s, j, i))\n"
    "    i = j - 1\n"
    "  end\n"
    "  while #a > 1 and a[#a] == 0 do a[#a] = nil end\n"
    "  return a\n"
    "end\n"
    "local function str(a)\n"
    "  local p = {string.format('%d', a[#a])}\n"
    "  for i = #a - 1, 1, -1 do p[#p + 1] = string.format('%07d', a[i]) end\n"
    "  return table.concat(p)\n"
    "end\n"
    "local function cmp(a, b)\n"
    "  if #a ~= #b then\n"
    "    if #a < #b then return -1 end\n"
    "    return 1\n"
    "  end\n"
    "  for i = #a, 1, -1 do\n"
    "    if a[i] ~= b[i] then\n"
    "      if a[i] < b[i] then return -1 end\n"
    "      return 1\n"
    "    end\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local function add(a, b)\n"
    "  local r, c = {}, 0\n"
    "  for i = 1, math.max(#a, #b) do\n"
    "    local s = (a[i] or 0) + (b[i] or 0) + c\n"
    "    if s >= BASE then r[i] = s - BASE; c = 1 else r[i] = s; c = 0 end\n"
    "  end\n"
    "  if c > 0 then r[#r + 1] = c end\n"
    "  return r\n"
    "end\n"
    "local function sub(a, b)\n"
    "  local r, c = {}, 0\n"
    "  for i = 1, #a do\n"
    "    local s = a[i] - (b[i] or 0) - c\n"
    "    if s < 0 then r[i] = s + BASE; c = 1 else r[i] = s; c = 0 end\n"
    "  end\n"
    "  while #r > 1 and r[#r] == 0 do r[#r] = nil end\n"
    "  return r\n"
    "end\n"
    "local function mul(a, b)\n"
    "  local r = {}\n"
    "  for i = 1, #a + #b do r[i] = 0 end\n"
    "  for i = 1, #a do\n"
    "    local c = 0\n"
    "    for j = 1, #b do\n"
    "      local s = r[i + j - 1] + a[i] * b[j] + c\n"
    "      c = math.floor(s / BASE)\n"
    "      r[i + j - 1] = s - c * BASE\n"
    "    end\n"
    "    r[i + #b] = c\n"
    "  end\n"
    "  while #r > 1 and r[#r] == 0 do r[#r] = nil end\n"
    "  return r\n"
    "end\n"
    "local function dbl(a)\n"
    "  local v = 0\n"
    "  for i = #a, 1, -1 do v = v * BASE + a[i] end\n"
    "  return v\n"
    "end\n"
    "local op, limit, nper, bper, cend = ARGV[1], num(ARGV[3]), num(ARGV[4]), num(ARGV[5]), num(ARGV[7])\n"
    "local extra = tonumber(ARGV[6])\n"
    "if not limit or not nper or not bper or not cend or not extra or dbl(limit) < 1 then\n"
    "  return redis.error_reply('ERR sluice: bad arguments')\n"
    "end\n"
    "local t = ARGV[2]\n"
    "if t == '' then\n"
    "  local tm = redis.call('TIME')\n"
    "  t = tm[1] .. string.format('%06d', tonumber(tm[2])) .. '000'\n"
    "end\n"
    "local tn = num(t)\n"
    "if not tn then return redis.error_reply('ERR sluice: bad time') end\n"
    "t = str(tn)\n"
    "local ts = mul(tn, limit)\n"
    "local tat = ts\n"
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur then\n"
    "  local c = num(cur)\n"
    "  if not c then return redis.error_reply('ERR sluice: bad stored value') end\n"
    "  if cmp(c, ts) > 0 then tat = c end\n"
    "end\n"
    "if op == 'Q' then return {t, str(tat)} end\n"
    "if op ~= 'C' then return redis.error_reply('ERR sluice: bad operation') end\n"
    "local new = add(tat, nper)\n"
    "-- a TAT past the end of the clock would never fit: dropped, as in the core\n"
    "if cmp(new, cend) > 0 or cmp(new, add(ts, bper)) > 0 then return {0, t, str(tat)} end\n"
    "local ttl = math.floor(dbl(sub(new, ts)) / dbl(limit) / 1e6) + 2 + extra\n"
    "if ttl > 1e15 then ttl = 1e15 end\n"
    "redis.call('SET', KEYS[1], str(new), 'PX', string.format('%.0f', ttl))\n"
    "return {1, t, str(new)}\n"
    ;

const char *sluice_fleet_script(void) { return script; }

size_t sluice__fleet_script_len(void) { return sizeof script - 1; }

/* ------------------------------------------------------------------ SHA-1 (FIPS 180-4) */

static uint32_t rol32(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *p) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999u;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1u;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDCu;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6u;
        }
        uint32_t tmp = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = tmp;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void sluice__fleet_sha1_hex(const void *data, size_t len, char out[41]) {
    uint32_t h[5] = { 0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u };
    const unsigned char *p = data;
    size_t left = len;
    while (left >= 64) {
        sha1_block(h, p);
        p += 64;
        left -= 64;
    }
    unsigned char tail[128];
    memset(tail, 0, sizeof tail);
    memcpy(tail, p, left);
    tail[left] = 0x80;
    size_t tlen = left + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tlen == 128) sha1_block(h, tail + 64);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 20; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[40] = '\0';
}
