/*
 * fleet_script.c — the Lua script that makes one fleet decision in Redis, and
 * SHA-1 (to name it for EVALSHA without waiting for SCRIPT LOAD).
 */
#include <stdint.h>
#include <string.h>

#include "fleet-internal.h"

/* The script, one C string literal per Lua line. */
static const char script[] =
    "-- sluice fleet: GCRA rate decisions, atomically.\n"
    "-- Times are ns scaled by the policy's limit (T = per/limit becomes the integer per),\n"
    "-- kept as decimal strings and computed exactly with base-1e7 limbs: Lua numbers are\n"
    "-- doubles, exact only to 2^53 (a call uses doubles where every number is provably\n"
    "-- below it: see fast). Stored value: the key's TAT scaled by limit.\n"
    "-- One decision: KEYS[1] the key. ARGV: 1 op ('C' call, 'Q' quota peek), 2 now in ns\n"
    "-- ('' = Redis TIME), 3 limit, 4 cost*per, 5 burst*per, 6 extra expiry in ms, 7 the end\n"
    "-- of the clock (2^64-1 ns) * limit. Reply: {status, t, TAT} (below).\n"
    "-- A batch: KEYS[1..n]. ARGV: 1 'B', 2 limit, 3 burst*per, 4 extra, 5 end of the clock,\n"
    "-- then for each key i three: op ('C' or 'Q'), now ('' = Redis TIME, read once for the\n"
    "-- batch), cost*per. The decisions are made in order, exactly as n single calls at those\n"
    "-- times (a key may appear twice). Reply: 3n values, {status, t, TAT} per key.\n"
    "-- status: 1 admitted (TAT after the call), 0 dropped or quota read (TAT = max(stored,\n"
    "-- t*limit)), -1 the key holds a value that is not Sluice state (TAT = 'WRONGTYPE' or\n"
    "-- 'BADVALUE'): that key alone fails, and is left as it is.\n"
    "-- Every argument and every key's stored value is checked before anything is written, so\n"
    "-- an error reply means that nothing was written.\n"
    "if redis.replicate_commands then pcall(redis.replicate_commands) end\n"
    "local BASE = 10000000\n"
    "local sub, find, fmt, floor, tonumber = string.sub, string.find, string.format, math.floor, tonumber\n"
    "local rcall = redis.call\n"
    "local function num(s)\n"
    "  if type(s) ~= 'string' then return nil end\n"
    "  local n = #s\n"
    "  if n == 0 or n > 60 or find(s, '%D') then return nil end\n"
    "  if n <= 7 then return {tonumber(s)} end\n"
    "  local a, i, k = {}, n, 0\n"
    "  while i >= 1 do\n"
    "    local j = i - 6\n"
    "    if j < 1 then j = 1 end\n"
    "    k = k + 1\n"
    "    a[k] = tonumber(sub(s, j, i))\n"
    "    i = j - 1\n"
    "  end\n"
    "  while k > 1 and a[k] == 0 do a[k] = nil; k = k - 1 end\n"
    "  return a\n"
    "end\n"
    "local function str(a)\n"
    "  local n = #a\n"
    "  if n == 1 then return fmt('%d', a[1]) end\n"
    "  if n == 2 then return fmt('%d%07d', a[2], a[1]) end\n"
    "  if n == 3 then return fmt('%d%07d%07d', a[3], a[2], a[1]) end\n"
    "  if n == 4 then return fmt('%d%07d%07d%07d', a[4], a[3], a[2], a[1]) end\n"
    "  if n == 5 then return fmt('%d%07d%07d%07d%07d', a[5], a[4], a[3], a[2], a[1]) end\n"
    "  local p = {fmt('%d', a[n])}\n"
    "  for i = n - 1, 1, -1 do p[#p + 1] = fmt('%07d', a[i]) end\n"
    "  return table.concat(p)\n"
    "end\n"
    "local function cmp(a, b)\n"
    "  local na, nb = #a, #b\n"
    "  if na ~= nb then\n"
    "    if na < nb then return -1 end\n"
    "    return 1\n"
    "  end\n"
    "  for i = na, 1, -1 do\n"
    "    local x, y = a[i], b[i]\n"
    "    if x ~= y then\n"
    "      if x < y then return -1 end\n"
    "      return 1\n"
    "    end\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local function add(a, b)\n"
    "  local r, c = {}, 0\n"
    "  local n = #a\n"
    "  if #b > n then n = #b end\n"
    "  for i = 1, n do\n"
    "    local s = (a[i] or 0) + (b[i] or 0) + c\n"
    "    if s >= BASE then r[i] = s - BASE; c = 1 else r[i] = s; c = 0 end\n"
    "  end\n"
    "  if c > 0 then r[n + 1] = c end\n"
    "  return r\n"
    "end\n"
    "local function subtract(a, b)\n"
    "  local r, c = {}, 0\n"
    "  local n = #a\n"
    "  for i = 1, n do\n"
    "    local s = a[i] - (b[i] or 0) - c\n"
    "    if s < 0 then r[i] = s + BASE; c = 1 else r[i] = s; c = 0 end\n"
    "  end\n"
    "  while n > 1 and r[n] == 0 do r[n] = nil; n = n - 1 end\n"
    "  return r\n"
    "end\n"
    "local function mul(a, b)\n"
    "  local r = {}\n"
    "  local na, nb = #a, #b\n"
    "  for i = 1, na + nb do r[i] = 0 end\n"
    "  for i = 1, na do\n"
    "    local c, ai = 0, a[i]\n"
    "    for j = 1, nb do\n"
    "      local s = r[i + j - 1] + ai * b[j] + c\n"
    "      c = floor(s / BASE)\n"
    "      r[i + j - 1] = s - c * BASE\n"
    "    end\n"
    "    r[i + nb] = c\n"
    "  end\n"
    "  local n = na + nb\n"
    "  while n > 1 and r[n] == 0 do r[n] = nil; n = n - 1 end\n"
    "  return r\n"
    "end\n"
    "local function dbl(a)\n"
    "  local v = 0\n"
    "  for i = #a, 1, -1 do v = v * BASE + a[i] end\n"
    "  return v\n"
    "end\n"
    "local function bad(what) return redis.error_reply('ERR sluice: ' .. what) end\n"
    "-- a decimal string without leading zeros above another (compared as strings: no parsing)\n"
    "local function above(a, b)\n"
    "  local na, nb = #a, #b\n"
    "  if na ~= nb then return na > nb end\n"
    "  return a > b\n"
    "end\n"
    "-- the policy's numbers, once per script run (the end of the clock stays a string)\n"
    "local function policy(limit_s, bper_s, extra_s, cend_s)\n"
    "  local P = {limit = num(limit_s), bper = num(bper_s), cend = cend_s, extra = tonumber(extra_s)}\n"
    "  if not P.limit or not P.bper or not P.extra or dbl(P.limit) < 1 or type(cend_s) ~= 'string' or #cend_s == 0\n"
    "    or find(cend_s, '%D') or sub(cend_s, 1, 1) == '0' then return nil end\n"
    "  P.dlimit = dbl(P.limit)\n"
    "  if #bper_s <= 15 then P.bd = tonumber(bper_s) end -- below 1e15: the fast path may run\n"
    "  return P\n"
    "end\n"
    "-- the time of a decision: {t string, t*limit, t*limit + burst*per}, cached per time string\n"
    "-- ('' = the server's TIME, read once per script run and turned into limbs without parsing)\n"
    "local times = {}\n"
    "local function clock(P, now)\n"
    "  local c = times[now]\n"
    "  if c then return c end\n"
    "  local ts_string, tn\n"
    "  if now == '' then\n"
    "    local tm = rcall('TIME')\n"
    "    local sec, usec = tonumber(tm[1]), tonumber(tm[2])\n"
    "    local x = usec * 1000\n"
    "    local l0 = x % BASE\n"
    "    local hi = sec * 100 + (x - l0) / BASE\n"
    "    local l1 = hi % BASE\n"
    "    local l2 = (hi - l1) / BASE\n"
    "    if l2 > 0 then tn = {l0, l1, l2} elseif l1 > 0 then tn = {l0, l1} else tn = {l0} end\n"
    "    ts_string = str(tn)\n"
    "  else\n"
    "    tn = num(now)\n"
    "    if not tn then return nil end\n"
    "    ts_string = str(tn)\n"
    "  end\n"
    "  local ts = mul(tn, P.limit)\n"
    "  c = {ts_string, ts, add(ts, P.bper), nil}\n"
    "  times[now] = c\n"
    "  return c\n"
    "end\n"
    "-- the stored state of the keys of this run, read once per key before any write:\n"
    "-- state[key] the TAT as a decimal string without leading zeros, or false (no value);\n"
    "-- badv[key] why the value is not Sluice state ('WRONGTYPE' or 'BADVALUE')\n"
    "local state, badv = {}, {}\n"
    "local function load(key)\n"
    "  if state[key] ~= nil or badv[key] then return true end\n"
    "  local v = redis.pcall('GET', key)\n"
    "  if type(v) == 'table' then\n"
    "    if v.err and sub(v.err, 1, 9) == 'WRONGTYPE' then badv[key] = 'WRONGTYPE'; return true end\n"
    "    return false, v -- another error (NOPERM...): the run fails, nothing written yet\n"
    "  end\n"
    "  if not v then state[key] = false; return true end\n"
    "  if #v == 0 or #v > 60 or find(v, '%D') then badv[key] = 'BADVALUE'; return true end\n"
    "  if #v > 1 and sub(v, 1, 1) == '0' then v = str(num(v)) end\n"
    "  state[key] = v\n"
    "  return true\n"
    "end\n"
    "-- cost*per as limbs, and as a double when it has at most 15 digits (else false),\n"
    "-- once per distinct string\n"
    "local nper_cache, nper_dbl = {}, {}\n"
    "local function nper_of(nper_s)\n"
    "  if type(nper_s) ~= 'string' then return nil end\n"
    "  local nper = nper_cache[nper_s]\n"
    "  if not nper then\n"
    "    nper = num(nper_s)\n"
    "    if not nper then return nil end\n"
    "    nper_cache[nper_s] = nper\n"
    "    nper_dbl[nper_s] = #nper_s <= 15 and tonumber(nper_s)\n"
    "  end\n"
    "  return nper\n"
    "end\n"
    "-- checks one request and reads its key: nil, or an error reply\n"
    "local function check(P, key, op, now, nper_s)\n"
    "  if op ~= 'C' and op ~= 'Q' then return bad('bad operation') end\n"
    "  if not clock(P, now) then return bad('bad time') end\n"
    "  if not nper_of(nper_s) then return bad('bad arguments') end\n"
    "  local ok, err = load(key)\n"
    "  if not ok then return err end\n"
    "  return nil\n"
    "end\n"
    "-- t*limit as a string; and split for the fast path: all but its last 15 digits, and\n"
    "-- those 15 as a double (below 1e15 < 2^53: exact)\n"
    "local function ts_string(T)\n"
    "  local s = T[4]\n"
    "  if not s then s = str(T[2]); T[4] = s end\n"
    "  return s\n"
    "end\n"
    "local function ts_split(T)\n"
    "  if T[7] == nil then\n"
    "    local s = ts_string(T)\n"
    "    local n = #s\n"
    "    if n > 15 then T[6] = sub(s, 1, n - 15); T[7] = tonumber(sub(s, n - 14))\n"
    "    else T[6] = ''; T[7] = tonumber(s) end\n"
    "  end\n"
    "  return T[6], T[7]\n"
    "end\n"
    "-- The fast path: a call on a key whose TAT `cur` is after t, in doubles, taken only\n"
    "-- when every number is provably below 2^53 and so exact: cost*per and burst*per have\n"
    "-- at most 15 digits; cur and t*limit both have at most 15, or have one length and\n"
    "-- the same digits but their last 15; and cur's low part + cost*per stays below 1e15\n"
    "-- (no carry into the shared digits). Then new - t*limit (new = cur + cost*per) and\n"
    "-- its comparison with burst*per are exact, and new's string is the shared digits and\n"
    "-- its low part. Returns nil when a bound fails (the limbs decide), false for a drop,\n"
    "-- or true, new's string, new - t*limit.\n"
    "local function fast(P, T, cur, nper_s)\n"
    "  local nd, bd = nper_dbl[nper_s], P.bd\n"
    "  if not nd or not bd then return nil end\n"
    "  local pre, sl = ts_split(T)\n"
    "  local n, cl = #cur\n"
    "  if n <= 15 and pre == '' then\n"
    "    cl = tonumber(cur)\n"
    "  elseif n == #pre + 15 and sub(cur, 1, n - 15) == pre then\n"
    "    cl = tonumber(sub(cur, n - 14))\n"
    "  else\n"
    "    return nil\n"
    "  end\n"
    "  local nl = cl + nd\n"
    "  if nl >= 1e15 then return nil end\n"
    "  local d = nl - sl\n"
    "  if d > bd then return false end\n"
    "  if pre == '' then return true, fmt('%.0f', nl), d end\n"
    "  return true, pre .. fmt('%015.0f', nl), d\n"
    "end\n"
    "-- one decision (after check): status, the time string, the TAT string (see above)\n"
    "local function decide(P, key, op, now, nper_s)\n"
    "  local T = clock(P, now)\n"
    "  local why = badv[key]\n"
    "  if why then return -1, T[1], why end\n"
    "  local s = ts_string(T)\n"
    "  -- the TAT, or false: no state, or a TAT not after t (the key's burst is whole)\n"
    "  local cur = state[key]\n"
    "  if cur and not above(cur, s) then cur = false end\n"
    "  if op == 'Q' then return 0, T[1], cur or s end\n"
    "  if not cur then\n"
    "    -- a whole burst: the outcome, new TAT and expiry are the same for every\n"
    "    -- such key at this time and cost, computed once\n"
    "    local fresh = T[5]\n"
    "    if not fresh then fresh = {}; T[5] = fresh end\n"
    "    local e = fresh[nper_s]\n"
    "    if not e then\n"
    "      e = {false}\n"
    "      local nper = nper_of(nper_s)\n"
    "      local new = add(T[2], nper)\n"
    "      if cmp(new, T[3]) <= 0 then\n"
    "        local ns = str(new)\n"
    "        -- a TAT past the end of the clock would never fit: dropped, as in the core\n"
    "        if not above(ns, P.cend) then\n"
    "          local ttl = floor(dbl(nper) / P.dlimit / 1e6) + 2 + P.extra\n"
    "          if ttl > 1e15 then ttl = 1e15 end\n"
    "          e = {true, ns, fmt('%.0f', ttl)}\n"
    "        end\n"
    "      end\n"
    "      fresh[nper_s] = e\n"
    "    end\n"
    "    if not e[1] then return 0, T[1], s end\n"
    "    rcall('SET', key, e[2], 'PX', e[3])\n"
    "    state[key] = e[2]\n"
    "    return 1, T[1], e[2]\n"
    "  end\n"
    "  local ok, ns, d = fast(P, T, cur, nper_s)\n"
    "  if ok == false then return 0, T[1], cur end\n"
    "  if ok == nil then\n"
    "    local new = add(num(cur), nper_of(nper_s))\n"
    "    if cmp(new, T[3]) > 0 then return 0, T[1], cur end\n"
    "    ns = str(new)\n"
    "    d = dbl(subtract(new, T[2]))\n"
    "  end\n"
    "  -- a TAT past the end of the clock would never fit: dropped, as in the core\n"
    "  if above(ns, P.cend) then return 0, T[1], cur end\n"
    "  local ttl = floor(d / P.dlimit / 1e6) + 2 + P.extra\n"
    "  if ttl > 1e15 then ttl = 1e15 end\n"
    "  rcall('SET', key, ns, 'PX', fmt('%.0f', ttl))\n"
    "  state[key] = ns\n"
    "  return 1, T[1], ns\n"
    "end\n"
    "if ARGV[1] == 'B' then\n"
    "  local P = policy(ARGV[2], ARGV[3], ARGV[4], ARGV[5])\n"
    "  if not P then return bad('bad arguments') end\n"
    "  local n = #KEYS\n"
    "  if #ARGV ~= 5 + 3 * n then return bad('bad arguments') end\n"
    "  for i = 1, n do\n"
    "    local j = 3 + 3 * i\n"
    "    local err = check(P, KEYS[i], ARGV[j], ARGV[j + 1], ARGV[j + 2])\n"
    "    if err then return err end\n"
    "  end\n"
    "  local out = {}\n"
    "  for i = 1, n do\n"
    "    local j = 3 + 3 * i\n"
    "    local a, t, tat = decide(P, KEYS[i], ARGV[j], ARGV[j + 1], ARGV[j + 2])\n"
    "    out[3 * i - 2] = a\n"
    "    out[3 * i - 1] = t\n"
    "    out[3 * i] = tat\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "local P = policy(ARGV[3], ARGV[5], ARGV[6], ARGV[7])\n"
    "if not P then return bad('bad arguments') end\n"
    "local err = check(P, KEYS[1], ARGV[1], ARGV[2], ARGV[4])\n"
    "if err then return err end\n"
    "local a, t, tat = decide(P, KEYS[1], ARGV[1], ARGV[2], ARGV[4])\n"
    "return {a, t, tat}\n";

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
