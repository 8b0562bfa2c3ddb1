"""Token-aware tenant quotas: reserve at admission, settle with real usage, release on cancel.

Limits: requests/min and tokens/min are token buckets (capacity = the per-minute limit,
refilled continuously), tokens/day a counter per UTC day, max concurrent a counter. A
reservation takes 1 request, the estimated prompt tokens plus ``max_tokens`` of every sequence
(:func:`tokenfleet.gateway.policy.usage.reservation`), and 1 concurrency slot — all or nothing.
Settling refunds what the request did not use (or charges what it used beyond the estimate)
and frees the slot.

Overshoot, the one way usage can exceed a limit: completion tokens never exceed the reserved
``max_tokens`` of every sequence, so only an underestimated prompt can overshoot, by (real −
estimated) prompt tokens of the requests settled in the window. Reservations are atomic (one
Lua script in Redis), so concurrent replicas never both take the last tokens.

:data:`LUA` runs in Redis; :class:`Buckets` is the same arithmetic in Python, used for
fail-open local limits when Redis is down and as the reference the script is tested against.
"""

from __future__ import annotations

import dataclasses
import math

from tokenfleet.gateway.policy.rejections import Reason, Rejected

SECONDS_PER_DAY = 86400


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """A tenant's limits; None means unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    max_concurrent: int | None = None

    def scaled(self, share: float) -> Limits:
        """These limits divided among replicas (fail-open local limits)."""

        def part(x: int | None) -> int | None:
            return None if x is None else max(1, math.floor(x * share))

        return Limits(
            requests_per_minute=part(self.requests_per_minute),
            tokens_per_minute=part(self.tokens_per_minute),
            tokens_per_day=part(self.tokens_per_day),
            max_concurrent=part(self.max_concurrent),
        )

    def as_args(self) -> list[int]:
        """For the Lua script: -1 means unlimited."""
        return [
            -1 if x is None else x
            for x in (
                self.requests_per_minute,
                self.tokens_per_minute,
                self.tokens_per_day,
                self.max_concurrent,
            )
        ]


def _prelude(clock_arg: int) -> str:
    """The scripts' common start: ``now`` (the test-only clock in ARGV[clock_arg], else Redis's
    TIME), and a token bucket's refilled level and its exact store."""
    return f"""
local now
if ARGV[{clock_arg}] then
  now = tonumber(ARGV[{clock_arg}])
else
  local now_s, now_us = unpack(redis.call('TIME'))
  now = tonumber(now_s) + tonumber(now_us) / 1e6
end
local function level(key, cap)
  local state = redis.call('HMGET', key, 'level', 'at')
  local lvl, at = tonumber(state[1]), tonumber(state[2])
  if lvl == nil then return cap end
  return math.min(cap, lvl + (now - at) * cap / 60.0)
end
local function store(key, lvl)
  local exact = '%.17g'
  redis.call('HSET', key, 'level', string.format(exact, lvl), 'at', string.format(exact, now))
  redis.call('EXPIRE', key, 120)
end
"""


# Redis keys (KEYS): rpm bucket, tpm bucket (hashes: level, at), tpd counter, concurrency counter.
# ARGV: op ("reserve" | "settle"), tokens, refund_tokens, rpm, tpm, tpd, conc, day_seconds_left,
# and optionally the clock in seconds (tests replay the script against Buckets with it; the
# gateway leaves it out, so every replica reads Redis's one clock).
# reserve → {1, 0, ""} or {0, retry_after_ms, reason}; settle → {1, 0, ""}.
# Levels are stored with 17 significant digits, so a stored double reads back bit-exact and the
# script's arithmetic equals Buckets' to the last bit (tests/integration/test_quota_script.py).
LUA = (
    _prelude(9)
    + """
local op, tokens, refund = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local rpm, tpm = tonumber(ARGV[4]), tonumber(ARGV[5])
local tpd, conc = tonumber(ARGV[6]), tonumber(ARGV[7])
local day_left = tonumber(ARGV[8])

if op == 'settle' then
  if tpm >= 0 then store(KEYS[2], level(KEYS[2], tpm) + refund) end
  if tpd >= 0 then
    redis.call('INCRBY', KEYS[3], 0 - refund)  -- not -refund: -0 is "-0", not an integer
    redis.call('EXPIRE', KEYS[3], day_left + 60)
  end
  if conc >= 0 and tonumber(redis.call('GET', KEYS[4]) or '0') > 0 then
    redis.call('DECR', KEYS[4])
  end
  return {1, 0, ''}
end

local r = rpm >= 0 and level(KEYS[1], rpm) or 0
local t = tpm >= 0 and level(KEYS[2], tpm) or 0
if rpm >= 0 and r < 1 then return {0, math.ceil((1 - r) * 60000 / rpm), 'requests_per_minute'} end
if tpm >= 0 and tokens > tpm then return {0, -1, 'tokens_per_minute_too_small'} end
if tpm >= 0 and t < tokens then
  return {0, math.ceil((tokens - t) * 60000 / tpm), 'tokens_per_minute'}
end
if tpd >= 0 and tonumber(redis.call('GET', KEYS[3]) or '0') + tokens > tpd then
  return {0, day_left * 1000, 'tokens_per_day'}
end
if conc >= 0 and tonumber(redis.call('GET', KEYS[4]) or '0') >= conc then
  return {0, 1000, 'max_concurrent'}
end
if rpm >= 0 then store(KEYS[1], r - 1) end
if tpm >= 0 then store(KEYS[2], t - tokens) end
if tpd >= 0 then
  redis.call('INCRBY', KEYS[3], tokens)
  redis.call('EXPIRE', KEYS[3], day_left + 60)
end
if conc >= 0 then
  redis.call('INCR', KEYS[4])
  redis.call('EXPIRE', KEYS[4], 3600)
end
return {1, 0, ''}
"""
)


# Leases (tokenfleet.gateway.policy.leases): one replica takes a share of the RPM, TPM and TPD
# budgets and of the concurrency slots at once and draws on it in memory. KEYS: as above. ARGV:
# op ("lease" | "return"), requests, tokens, slots, extra_requests, extra_tokens, extra_slots,
# rpm, tpm, tpd, conc, day_seconds_left, [clock]. lease grants at least (requests, tokens,
# slots) — else refuses as reserve does (slots only while counter + slots <= conc) — and up to
# the extras more, as far as the balances reach: {1, requests, tokens, slots granted} or {0,
# retry_after_ms, reason, 0}. A grant refreshes the concurrency counter's expiry as a
# reservation does (so it lasts while any replica admits requests). return gives (requests,
# tokens, slots) back (negative tokens: charges them; the counter never goes below 0, whatever
# the limits now): {1, 0, 0, 0}.
LEASE_LUA = (
    _prelude(13)
    + """
local op = ARGV[1]
local requests, tokens, slots = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local extra_requests, extra_tokens = tonumber(ARGV[5]), tonumber(ARGV[6])
local extra_slots = tonumber(ARGV[7])
local rpm, tpm, tpd = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local conc, day_left = tonumber(ARGV[11]), tonumber(ARGV[12])

local function count_day(delta)
  redis.call('INCRBY', KEYS[3], delta)
  redis.call('EXPIRE', KEYS[3], day_left + 60)
end

if op == 'return' then
  if rpm >= 0 and requests ~= 0 then store(KEYS[1], level(KEYS[1], rpm) + requests) end
  if tpm >= 0 and tokens ~= 0 then store(KEYS[2], level(KEYS[2], tpm) + tokens) end
  if tpd >= 0 and tokens ~= 0 then count_day(0 - tokens) end
  if slots > 0 then
    local back = math.min(slots, tonumber(redis.call('GET', KEYS[4]) or '0'))
    if back > 0 then redis.call('DECRBY', KEYS[4], back) end
  end
  return {1, 0, 0, 0}
end

local r = rpm >= 0 and level(KEYS[1], rpm) or 0
local t = tpm >= 0 and level(KEYS[2], tpm) or 0
local day_used = tpd >= 0 and tonumber(redis.call('GET', KEYS[3]) or '0') or 0
local running = conc >= 0 and tonumber(redis.call('GET', KEYS[4]) or '0') or 0
if rpm >= 0 and r < requests then
  return {0, math.ceil((requests - r) * 60000 / rpm), 'requests_per_minute', 0}
end
if tpm >= 0 and tokens > tpm then return {0, -1, 'tokens_per_minute_too_small', 0} end
if tpm >= 0 and t < tokens then
  return {0, math.ceil((tokens - t) * 60000 / tpm), 'tokens_per_minute', 0}
end
if tpd >= 0 and day_used + tokens > tpd then return {0, day_left * 1000, 'tokens_per_day', 0} end
if conc >= 0 and slots > 0 and running + slots > conc then return {0, 1000, 'max_concurrent', 0} end
local granted_requests, granted_tokens = requests + extra_requests, tokens + extra_tokens
local granted_slots = 0
if rpm >= 0 then
  granted_requests = math.max(requests, math.min(granted_requests, math.floor(r)))
end
if tpm >= 0 then granted_tokens = math.max(tokens, math.min(granted_tokens, math.floor(t))) end
if tpd >= 0 then granted_tokens = math.max(tokens, math.min(granted_tokens, tpd - day_used)) end
if conc >= 0 then granted_slots = math.max(slots, math.min(slots + extra_slots, conc - running)) end
if rpm >= 0 and granted_requests ~= 0 then store(KEYS[1], r - granted_requests) end
if tpm >= 0 and granted_tokens ~= 0 then store(KEYS[2], t - granted_tokens) end
if tpd >= 0 and granted_tokens ~= 0 then count_day(granted_tokens) end
if conc >= 0 then
  if granted_slots ~= 0 then redis.call('INCRBY', KEYS[4], granted_slots) end
  redis.call('EXPIRE', KEYS[4], 3600)
end
return {1, granted_requests, granted_tokens, granted_slots}
"""
)


def keys(tenant: str, day: int) -> list[str]:
    """Redis keys of one tenant; the {tenant} hash tag keeps them in one cluster slot."""
    base = f"tf:q:{{{tenant}}}"
    return [f"{base}:rpm", f"{base}:tpm", f"{base}:tpd:{day}", f"{base}:conc"]


def day_of(now: float) -> tuple[int, int]:
    """(UTC day number, seconds left in it)."""
    day = int(now // SECONDS_PER_DAY)
    return day, int((day + 1) * SECONDS_PER_DAY - now)


def refusal(reason: str, retry_after_ms: int, limits: Limits, tokens: int) -> Rejected:
    """The client-facing refusal for a limit the script (or :class:`Buckets`) named."""
    retry = retry_after_ms / 1000 if retry_after_ms >= 0 else None
    match reason:
        case "requests_per_minute":
            return Rejected(
                reason=Reason.RATE_LIMITED,
                retry_after=retry,
                message=f"rate limit of {limits.requests_per_minute} requests per minute reached",
            )
        case "tokens_per_minute":
            return Rejected(
                reason=Reason.RATE_LIMITED,
                retry_after=retry,
                message=f"rate limit of {limits.tokens_per_minute} tokens per minute reached "
                f"(this request reserves {tokens})",
            )
        case "tokens_per_minute_too_small":
            return Rejected(
                reason=Reason.RATE_LIMITED,
                param="max_tokens",
                message=f"this request reserves {tokens} tokens, more than the whole limit of "
                f"{limits.tokens_per_minute} per minute; lower max_tokens",
            )
        case "tokens_per_day":
            return Rejected(
                reason=Reason.DAILY_QUOTA,
                retry_after=retry,
                message=f"daily quota of {limits.tokens_per_day} tokens used up (resets 00:00 UTC)",
            )
        case _:
            return Rejected(
                reason=Reason.CONCURRENCY_LIMIT,
                retry_after=retry,
                message=f"at most {limits.max_concurrent} requests at once",
            )


@dataclasses.dataclass(slots=True)
class _Bucket:
    level: float
    at: float


@dataclasses.dataclass(slots=True)
class Buckets:
    """The Lua script's arithmetic for one tenant, in memory (fail-open mode, tests)."""

    rpm: _Bucket | None = None
    tpm: _Bucket | None = None
    per_day: dict[int, int] = dataclasses.field(default_factory=dict)
    concurrent: int = 0

    @staticmethod
    def _level(bucket: _Bucket | None, cap: int, now: float) -> float:
        if bucket is None:
            return float(cap)
        return min(cap, bucket.level + (now - bucket.at) * cap / 60.0)

    def reserve(self, limits: Limits, tokens: int, now: float) -> Rejected | None:
        day, left = day_of(now)
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        r = self._level(self.rpm, rpm, now) if rpm is not None else 0.0
        t = self._level(self.tpm, tpm, now) if tpm is not None else 0.0
        if rpm is not None and r < 1:
            return refusal("requests_per_minute", math.ceil((1 - r) * 60000 / rpm), limits, tokens)
        if tpm is not None and tokens > tpm:
            return refusal("tokens_per_minute_too_small", -1, limits, tokens)
        if tpm is not None and t < tokens:
            return refusal(
                "tokens_per_minute", math.ceil((tokens - t) * 60000 / tpm), limits, tokens
            )
        if (
            limits.tokens_per_day is not None
            and self.per_day.get(day, 0) + tokens > limits.tokens_per_day
        ):
            return refusal("tokens_per_day", left * 1000, limits, tokens)
        if limits.max_concurrent is not None and self.concurrent >= limits.max_concurrent:
            return refusal("max_concurrent", 1000, limits, tokens)
        if rpm is not None:
            self.rpm = _Bucket(r - 1, now)
        if tpm is not None:
            self.tpm = _Bucket(t - tokens, now)
        if limits.tokens_per_day is not None:
            self.per_day = {day: self.per_day.get(day, 0) + tokens}
        if limits.max_concurrent is not None:
            self.concurrent += 1
        return None

    def lease(
        self,
        limits: Limits,
        *,
        requests: int,
        tokens: int,
        extra_requests: int,
        extra_tokens: int,
        now: float,
        slots: int = 0,
        extra_slots: int = 0,
    ) -> Rejected | tuple[int, int, int]:
        """:data:`LEASE_LUA`'s lease: at least (requests, tokens, slots), up to the extras more;
        (requests, tokens, slots) granted, or the refusal."""
        day, left = day_of(now)
        rpm, tpm, tpd = limits.requests_per_minute, limits.tokens_per_minute, limits.tokens_per_day
        r = self._level(self.rpm, rpm, now) if rpm is not None else 0.0
        t = self._level(self.tpm, tpm, now) if tpm is not None else 0.0
        day_used = self.per_day.get(day, 0)
        if rpm is not None and r < requests:
            retry = math.ceil((requests - r) * 60000 / rpm)
            return refusal("requests_per_minute", retry, limits, tokens)
        if tpm is not None and tokens > tpm:
            return refusal("tokens_per_minute_too_small", -1, limits, tokens)
        if tpm is not None and t < tokens:
            return refusal(
                "tokens_per_minute", math.ceil((tokens - t) * 60000 / tpm), limits, tokens
            )
        if tpd is not None and day_used + tokens > tpd:
            return refusal("tokens_per_day", left * 1000, limits, tokens)
        conc = limits.max_concurrent
        if conc is not None and slots > 0 and self.concurrent + slots > conc:
            return refusal("max_concurrent", 1000, limits, tokens)
        granted_requests, granted_tokens = requests + extra_requests, tokens + extra_tokens
        granted_slots = 0
        if rpm is not None:
            granted_requests = max(requests, min(granted_requests, math.floor(r)))
        if tpm is not None:
            granted_tokens = max(tokens, min(granted_tokens, math.floor(t)))
        if tpd is not None:
            granted_tokens = max(tokens, min(granted_tokens, tpd - day_used))
        if conc is not None:
            granted_slots = max(slots, min(slots + extra_slots, conc - self.concurrent))
        if rpm is not None and granted_requests != 0:
            self.rpm = _Bucket(r - granted_requests, now)
        if tpm is not None and granted_tokens != 0:
            self.tpm = _Bucket(t - granted_tokens, now)
        if tpd is not None and granted_tokens != 0:
            self.per_day = {day: day_used + granted_tokens}
        self.concurrent += granted_slots
        return granted_requests, granted_tokens, granted_slots

    def give_back(
        self, limits: Limits, *, requests: int, tokens: int, now: float, slots: int = 0
    ) -> None:
        """:data:`LEASE_LUA`'s return: a lease's unspent part (negative tokens: a debt) and its
        free slots (whatever the limits now: the counter is the same)."""
        day, _ = day_of(now)
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        if rpm is not None and requests != 0:
            self.rpm = _Bucket(self._level(self.rpm, rpm, now) + requests, now)
        if tpm is not None and tokens != 0:
            self.tpm = _Bucket(self._level(self.tpm, tpm, now) + tokens, now)
        if limits.tokens_per_day is not None and tokens != 0:
            self.per_day = {day: self.per_day.get(day, 0) - tokens}
        self.concurrent -= min(max(0, slots), self.concurrent)

    def settle(self, limits: Limits, refund: int, now: float) -> None:
        """Give back ``refund`` tokens (negative: charge more) and free the concurrency slot."""
        day, _ = day_of(now)
        if limits.tokens_per_minute is not None:
            self.tpm = _Bucket(self._level(self.tpm, limits.tokens_per_minute, now) + refund, now)
        if limits.tokens_per_day is not None:
            self.per_day = {day: self.per_day.get(day, 0) - refund}
        if limits.max_concurrent is not None and self.concurrent > 0:
            self.concurrent -= 1
