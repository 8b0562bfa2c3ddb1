"""How many gateway processes share the engines' slots: counted, not configured (pure).

Each process admits its share of a pool's slots (``admission.share``): the slots divided by the
processes alive. A chart value cannot know that number — ``kubectl scale``, an HPA or a surge
pod during a rollout changes it — so every process registers in Redis and counts the others
(:data:`REGISTER_LUA`: a sorted set scored by Redis's own clock, entries older than
:data:`TTL_SECONDS` dropped), once per :data:`BEAT_SECONDS`.

The safe rule for the moments in between, direction by direction:

- **a process joins**: it registers when it starts, before it has a catalog (so before it can
  be Ready and take traffic), and counts itself from its first answer; every other process
  counts it at its next beat, within :data:`BEAT_SECONDS` — less than the time from a start to
  Ready, so the others have lowered their shares before the new one admits anything;
- **a process leaves**: a graceful stop removes its entry at once (the others raise their
  shares at their next beat); one that dies is dropped after :data:`TTL_SECONDS`, during which
  the others under-admit (the safe direction: the engines never run more than their slots);
- **Redis does not answer**: the last count stays (:func:`count_to_use`); before any answer,
  the configured count (replicas × workers) stands in, as it did before the registry.
"""

from __future__ import annotations

BEAT_SECONDS = 1.0
#: An entry not renewed for this long is a process that died: three missed beats.
TTL_SECONDS = 3.0

#: KEYS[1]: the fleet's sorted set. ARGV: process id, ttl (ms), "1" to leave. Returns how many
#: processes are registered (this one included unless it left). Redis's TIME, not the caller's
#: clock: processes on different nodes agree on what "expired" means.
REGISTER_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl * 10)
end
return redis.call('ZCARD', KEYS[1])
"""


def key(fleet: str) -> str:
    """The sorted set of one gateway fleet (one Deployment: its release and namespace)."""
    return f"tokenfleet:gateway-processes:{fleet}"


def count_to_use(counted: int | None, *, last: int | None, configured: int) -> int:
    """The processes to divide slots by: the registry's count when it answered (at least this
    one), else the last count it gave, else the configured one."""
    if counted is not None:
        return max(1, counted)
    if last is not None:
        return last
    return max(1, configured)
