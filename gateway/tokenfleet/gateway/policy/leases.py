"""Quota leases: a gateway replica holds a small share of a tenant's shared budget in memory.

Without them every request costs two Redis round trips (reserve, settle). With them a replica
takes a few requests' worth of a tenant's requests-per-minute, tokens-per-minute and
tokens-per-day at once (:data:`~tokenfleet.gateway.policy.quotas.LEASE_LUA`), admits requests
from that share in memory, settles into it, and gives back what it did not use once the tenant
has been quiet on this replica for :data:`IDLE_SECONDS` (or after :data:`HOLD_SECONDS` at
most). A busy tenant costs one round trip per :data:`REQUESTS_PER_LEASE` requests.

The bound, across any number of replicas: the shared limits hold exactly as without leases,
because every request is drawn from a share already taken from the shared balances — the one
way usage exceeds a limit is still an underestimated prompt (policy.quotas). What leasing costs
is the other direction: a share held by one replica is not available to the others until it is
given back, at most ``min(REQUESTS_PER_LEASE requests, SHARE_OF_LIMIT of the limit)`` per
replica and tenant. A replica that dies keeps its share: the per-minute buckets refill it by
themselves (within ``SHARE_OF_LIMIT`` × 60 s = 6 s), tokens per day lose at most
``SHARE_OF_DAY`` of the day's limit per death. Concurrency limits need an exact count of what
runs now, so tenants with ``maxConcurrent`` are not leased (two round trips, as before).

Pure: no I/O, clocks or randomness; times are passed in.
"""

from __future__ import annotations

import dataclasses
import math

from tokenfleet.gateway.policy.quotas import Limits

REQUESTS_PER_LEASE = 8  # one round trip admits this many requests like the one that asked
SHARE_OF_LIMIT = 0.1  # at most this much of a per-minute limit (per replica share) in one lease
SHARE_OF_DAY = 0.001  # at most this much of a tokens-per-day limit (about 1.4 min of it)
IDLE_SECONDS = 2.0  # give a share back once the tenant has been quiet this long here
HOLD_SECONDS = 10.0  # and after this long in any case, so that shares move to where demand is


def leasable(limits: Limits) -> bool:
    """Whether a tenant's requests are admitted from a lease (see the module's docstring)."""
    return limits != Limits() and limits.max_concurrent is None


@dataclasses.dataclass(slots=True)
class Lease:
    """What one replica holds of one tenant's budget. ``tokens`` goes below zero when requests
    used more than they reserved: the next lease covers that debt first."""

    limits: Limits
    requests: int = 0
    tokens: int = 0
    taken_at: float = 0.0  # when the first share of this lease was granted
    used_at: float = 0.0  # the last admission or settlement

    def take(self, tokens: int, now: float) -> bool:
        """Admit one request of ``tokens`` from the share, if it covers it."""
        if self.requests < 1 or self.tokens < tokens:
            return False
        self.draw(tokens, now)
        return True

    def draw(self, tokens: int, now: float) -> None:
        """Admit one request of ``tokens`` whether or not the share covers it."""
        self.requests -= 1
        self.tokens -= tokens
        self.used_at = now

    def shortfall(self, tokens: int) -> tuple[int, int]:
        """(requests, tokens) a new grant must bring at the least to admit ``tokens``."""
        return max(0, 1 - self.requests), max(0, tokens - self.tokens)

    def add(self, requests: int, tokens: int, now: float) -> None:
        """A grant arrived."""
        if self.requests <= 0 and self.tokens <= 0:
            self.taken_at = now  # a fresh share: its hold time starts now
        self.requests += requests
        self.tokens += tokens

    def settle(self, refund: int, now: float) -> None:
        """A request finished: what it reserved and did not use comes back (negative: it used
        more)."""
        self.tokens += refund
        self.used_at = now

    def due(self, now: float) -> bool:
        """Time to give the share back: the tenant went quiet here, or it was held long enough."""
        holds = self.requests != 0 or self.tokens != 0
        return holds and (now - self.used_at >= IDLE_SECONDS or now - self.taken_at >= HOLD_SECONDS)


def extras(limits: Limits, *, tokens: int, share: float) -> tuple[int, int]:
    """How much more than the request itself a lease asks for: room for
    :data:`REQUESTS_PER_LEASE` requests like this one, capped at this replica's share
    (``share`` = 1 / replicas) of :data:`SHARE_OF_LIMIT` of each limit."""
    more = REQUESTS_PER_LEASE - 1

    def capped(wanted: int, limit: int | None, fraction: float, taken: int) -> int:
        if limit is None:
            return wanted
        return max(0, min(wanted, math.floor(limit * fraction * share) - taken))

    extra_requests = capped(more, limits.requests_per_minute, SHARE_OF_LIMIT, 1)
    extra_tokens = capped(tokens * more, limits.tokens_per_minute, SHARE_OF_LIMIT, tokens)
    extra_tokens = capped(extra_tokens, limits.tokens_per_day, SHARE_OF_DAY, tokens)
    return extra_requests, extra_tokens
