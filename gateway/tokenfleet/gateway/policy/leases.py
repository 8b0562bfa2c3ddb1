"""Quota leases: a gateway replica holds a small share of a tenant's shared budget in memory.

Without them every request costs two Redis round trips (reserve, settle). With them a replica
takes a few requests' worth of a tenant's requests-per-minute, tokens-per-minute, tokens-per-day
and concurrency slots at once (:data:`~tokenfleet.gateway.policy.quotas.LEASE_LUA`), admits
requests from that share in memory, settles into it, and gives back what it did not use once the
tenant has been quiet on this replica for :data:`IDLE_SECONDS` (or after :data:`HOLD_SECONDS` at
most). A busy tenant costs one round trip per :data:`REQUESTS_PER_LEASE` requests.

The bound, across any number of replicas: the shared limits hold exactly as without leases,
because every request is drawn from a share already taken from the shared balances — the one
way usage exceeds a limit is still an underestimated prompt (policy.quotas). Concurrency too:
a leased request runs on a slot already counted in the shared counter (taken only while the
counter stays ≤ ``maxConcurrent``), so the requests in flight across all replicas never exceed
``maxConcurrent``. A request's slot returns to the lease when it settles; only free (idle) slots
are given back, never those of requests still running.

Bursts (:func:`ask`, :func:`hand_out`): the requests a lease cannot cover wait for its next
grant — one at a time per lease, asking for all of them at once: at least what the smallest
lacks, up to what they all lack plus the lease's top-up, as far as the shared balances reach.
So N requests sent at once to one replica cost one or two round trips and are all admitted
while the limit has N left, and up to what it has left beyond. The top-up — what the lease keeps
once the waiting requests drew theirs — is capped per lease, not per grant: room for
``REQUESTS_PER_LEASE`` − 1 more requests like the smallest waiting one, within
``SHARE_OF_LIMIT`` of this replica's share of each limit (:func:`extras`), and
:func:`slot_share` − 1 free slots, less what the lease holds. Whatever a grant's answer, a
waiting request the lease covers then goes (settlements bring tokens and slots back while a
grant is refused); one a grant fell short of waits for the next (:data:`GRANT_ROUNDS`).

What leasing costs is the other direction: a share held by one replica is not available to the
others until it is given back, at most ``min(REQUESTS_PER_LEASE requests, SHARE_OF_LIMIT of the
limit)`` per replica and tenant — ``SHARE_OF_LIMIT`` of the limit in all, with ``share`` = 1 /
replicas. A burst spread over replicas is admitted in full up to the limit less what the
others keep (the whole limit when a tenth of a replica's share is under two requests: 100 a
minute over six). For concurrency that is at most :func:`slot_share` free slots; settlements
may fill a lease beyond that with the slots of requests that just finished,
which others may reuse at once, and the store gives the surplus back at its next housekeeping
beat (half a second: ``quota_store.HOUSEKEEPING_SECONDS``). A replica that dies keeps its share: the
per-minute buckets refill it by themselves (within ``SHARE_OF_LIMIT`` × 60 s = 6 s), tokens per
day lose at most ``SHARE_OF_DAY`` of the day's limit per death, and the concurrency counter keeps
the dead replica's slots — those of its requests in flight, as without leases, plus at most
:func:`slot_share` free ones — until the counter's key expires (an hour after the last grant or
reservation of any replica).

A round trip whose answer is lost (:class:`Outcome`): Redis may or may not have run it — the
call timed out (the client's watchdog, half a second), the connection dropped after the write,
or the request that asked was cancelled (its client left). Each is resolved in the direction
that keeps the bound, at the cost of a leak: a grant whose answer is lost is not credited
(crediting one that did not run would admit requests on slots nobody holds),
and a give-back whose answer is lost counts as done (:func:`give_back_again`: giving back twice
would lower the counter below what runs). Such a grant's share stays taken — the per-minute
buckets refill it, and the concurrency counter keeps the grant's slots (at most
:func:`slot_share`) until the key expires (an hour after the tenant's last grant or
reservation on any replica); such a give-back's share the same way. A grant is never lost to a
cancelled request, though: it runs to its end whoever waits for it, and lands in the lease for
the next request to draw on. Only a give-back that certainly did not reach Redis (connecting
failed, or Redis answered an error) is kept and tried again.

Which tenants are leased (:func:`leasable`): any with a limit, except that a concurrency limit
too small to lease more than one slot at a time (:func:`slot_share` < 2: ``maxConcurrent`` ×
``SHARE_OF_LIMIT`` / replicas < 2, e.g. 10 with 2 replicas) keeps the exact per-request path —
reserve and settle in Redis — so that a slot one replica frees is at once free for the others.

Pure: no I/O, clocks or randomness; times are passed in.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

from tokenfleet.gateway.policy.quotas import Limits

REQUESTS_PER_LEASE = 8  # one round trip admits this many requests like the one that asked
SHARE_OF_LIMIT = 0.1  # at most this much of a per-minute limit (per replica share) in one lease
SHARE_OF_DAY = 0.001  # at most this much of a tokens-per-day limit (about 1.4 min of it)
IDLE_SECONDS = 2.0  # give a share back once the tenant has been quiet this long here
HOLD_SECONDS = 10.0  # and after this long in any case, so that shares move to where demand is
GRANT_ROUNDS = 3  # grants a waiting request waits through, each landing short of it, before the
# exact per-request path decides (a balance that ran short answers the next grant with a refusal)


def slot_share(limits: Limits, share: float) -> int:
    """The most concurrency slots one replica's lease holds free: ``SHARE_OF_LIMIT`` of this
    replica's share (``share`` = 1 / replicas) of ``maxConcurrent``, at most
    :data:`REQUESTS_PER_LEASE`; 0 without a concurrency limit."""
    if limits.max_concurrent is None:
        return 0
    return min(REQUESTS_PER_LEASE, math.floor(limits.max_concurrent * SHARE_OF_LIMIT * share))


def leasable(limits: Limits, *, share: float) -> bool:
    """Whether a tenant's requests are admitted from a lease: it has a limit, and a concurrency
    limit, if any, leaves room for a lease of at least two slots (see the module's docstring)."""
    if limits == Limits():
        return False
    return limits.max_concurrent is None or slot_share(limits, share) >= 2


class Outcome(enum.Enum):
    """What became of a grant's or a give-back's round trip."""

    APPLIED = "applied"  # Redis answered: it ran
    NOT_APPLIED = "not-applied"  # it never reached Redis, or Redis answered an error
    UNKNOWN = "unknown"  # sent, answer lost (timeout, connection lost, caller cancelled)


def give_back_again(outcome: Outcome) -> bool:
    """Whether a give-back is kept, to be tried again: only one that certainly did not run. A
    lost answer is taken as done (a leak), never as undone (a second give-back would lower the
    shared counter below what runs)."""
    return outcome is Outcome.NOT_APPLIED


@dataclasses.dataclass(slots=True)
class Lease:
    """What one replica holds of one tenant's budget. ``tokens`` goes below zero when requests
    used more than they reserved: the next lease covers that debt first. ``free_slots`` are
    concurrency slots counted in Redis that no request of this replica runs on; with a
    concurrency limit every admitted request draws one, and its settlement brings it back."""

    limits: Limits
    share: float = 1.0  # this replica's part of the limits: 1 / replicas
    requests: int = 0
    tokens: int = 0
    free_slots: int = 0
    taken_at: float = 0.0  # when the first share of this lease was granted
    used_at: float = 0.0  # the last admission or settlement

    @property
    def counts_slots(self) -> bool:
        return self.limits.max_concurrent is not None

    @property
    def max_free_slots(self) -> int:
        return slot_share(self.limits, self.share)

    def holds(self) -> bool:
        return self.requests != 0 or self.tokens != 0 or self.free_slots != 0

    def has_slot(self) -> bool:
        return not self.counts_slots or self.free_slots >= 1

    def take(self, tokens: int, now: float) -> bool:
        """Admit one request of ``tokens`` from the share, if it covers it."""
        if self.requests < 1 or self.tokens < tokens or not self.has_slot():
            return False
        self.draw(tokens, now)
        return True

    def draw(self, tokens: int, now: float) -> None:
        """Admit one request of ``tokens`` whether or not the share covers its request and
        tokens (a debt the next grant covers first) — but never without a slot: a concurrency
        limit allows no debt, so check :meth:`has_slot` first. The gateway draws through
        :meth:`take` only; this is the arithmetic."""
        assert self.has_slot()
        self.requests -= 1
        self.tokens -= tokens
        if self.counts_slots:
            self.free_slots -= 1
        self.used_at = now

    def shortfall(self, tokens: int) -> tuple[int, int, int]:
        """(requests, tokens, slots) a new grant must bring at the least to admit ``tokens``."""
        slots = max(0, 1 - self.free_slots) if self.counts_slots else 0
        return max(0, 1 - self.requests), max(0, tokens - self.tokens), slots

    def put_back(self, tokens: int) -> None:
        """Undo a :meth:`take` whose request left before it learnt it was admitted: its
        request, tokens and slot are the lease's again."""
        self.requests += 1
        self.tokens += tokens
        if self.counts_slots:
            self.free_slots += 1

    def add(self, requests: int, tokens: int, now: float, slots: int = 0) -> None:
        """A grant arrived."""
        if self.requests <= 0 and self.tokens <= 0 and self.free_slots <= 0:
            self.taken_at = now  # a fresh share: its hold time starts now
        self.requests += requests
        self.tokens += tokens
        self.free_slots += slots

    def settle(self, refund: int, now: float, *, slot_of: Limits | None = None) -> bool:
        """A request finished: what it reserved and did not use comes back (negative: it used
        more), and so does its concurrency slot, if it drew one (under the limits ``slot_of``),
        as a free slot. Returns whether the slot must go straight back to the shared counter
        instead: it was drawn under other limits (they changed since)."""
        self.tokens += refund
        self.used_at = now
        if slot_of is None:
            return False
        if slot_of != self.limits:
            return True
        self.free_slots += 1
        return False

    def surplus_slots(self) -> int:
        """Free slots beyond ``max_free_slots`` (settlements brought them), taken out of the
        lease: give them back to the shared counter."""
        surplus = max(0, self.free_slots - self.max_free_slots)
        self.free_slots -= surplus
        return surplus

    def due(self, now: float) -> bool:
        """Time to give the share back: the tenant went quiet here, or it was held long enough."""
        return self.holds() and (
            now - self.used_at >= IDLE_SECONDS or now - self.taken_at >= HOLD_SECONDS
        )

    def hand_back(self) -> tuple[int, int, int]:
        """Empty the lease: (requests, tokens, free slots) to give back. Emptied before the
        round trip, so that no request draws on what is on its way back."""
        held = self.requests, self.tokens, self.free_slots
        self.requests = self.tokens = self.free_slots = 0
        return held

    def keep(self, requests: int, tokens: int, slots: int) -> None:
        """What certainly did not reach Redis (:func:`give_back_again`) stays held, to be
        tried again."""
        self.requests += requests
        self.tokens += tokens
        self.free_slots += slots


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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A request its lease could not cover, waiting for the lease's next grant."""

    tokens: int
    limits: Limits  # the tenant's limits when it came: a lease under others is not for it
    rounds: int = 0  # grants that landed without covering it


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """One grant's question to Redis (``quotas.LEASE_LUA``'s lease): at least ``requests``,
    ``tokens`` and ``slots`` — else it is refused — and up to the extras more, as far as the
    shared balances reach."""

    requests: int
    tokens: int
    slots: int
    extra_requests: int
    extra_tokens: int
    extra_slots: int

    def args(self) -> list[int]:
        """In the script's ARGV order."""
        return [
            self.requests,
            self.tokens,
            self.slots,
            self.extra_requests,
            self.extra_tokens,
            self.extra_slots,
        ]


def ask(lease: Lease, waiting: Sequence[Waiting]) -> Ask | None:
    """What one grant asks for, for all the requests waiting on ``lease`` under its limits at
    once; None when none does.

    At least what the smallest of them lacks, so that a refusal refuses every one of them. At
    most what they all lack together plus the lease's top-up — room for
    :data:`REQUESTS_PER_LEASE` − 1 more requests like that smallest one, within
    ``SHARE_OF_LIMIT`` of this process's share of each limit (:func:`extras`), and
    ``max_free_slots`` − 1 free slots — less what the lease holds already. The cap is the
    lease's, not the grant's: however many requests wait, what the lease keeps once they drew
    is the top-up at most."""
    mine = [w for w in waiting if w.limits == lease.limits]
    if not mine:
        return None
    smallest = min(w.tokens for w in mine)
    requests, tokens, slots = lease.shortfall(smallest)
    top_requests, top_tokens = extras(lease.limits, tokens=smallest, share=lease.share)
    wanted_slots = len(mine) + lease.max_free_slots - 1 - lease.free_slots - slots
    return Ask(
        requests=requests,
        tokens=tokens,
        slots=slots,
        extra_requests=max(0, len(mine) + top_requests - lease.requests - requests),
        extra_tokens=max(0, sum(w.tokens for w in mine) + top_tokens - lease.tokens - tokens),
        extra_slots=max(0, wanted_slots) if lease.counts_slots else 0,
    )


class Grant(enum.Enum):
    """What a grant's round trip came to."""

    GRANTED = "granted"  # added to the lease: what was asked, or less if the balances ran short
    REFUSED = "refused"  # Redis refused even the least asked: a limit is reached
    UNANSWERED = "unanswered"  # nothing to credit: Redis down, the answer lost (see above), or
    # the limits changed meanwhile (the grant went back)


class Turn(enum.Enum):
    """What becomes of a waiting request once its grant's answer is in."""

    ADMITTED = "admitted"  # drawn from the lease
    WAIT = "wait"  # not asked for yet: it waits for the next grant
    AGAIN = "again"  # the grant landed short of it: it waits for the next one, a round later
    REFUSED = "refused"  # the grant was refused, and the lease does not cover it either
    PER_REQUEST = "per-request"  # no grant to wait for: the exact per-request path decides (or,
    # Redis down, the fallback)


def hand_out(
    lease: Lease, waiting: Sequence[Waiting], *, grant: Grant | None, now: float
) -> list[Turn]:
    """Each waiting request's turn, oldest first, once a grant's answer is in (``grant``), or
    before a grant is asked for (None: what the lease holds already goes at once, the rest
    wait). Admitted if the lease covers it now, whatever the answer: a refused grant is not the
    last word, since what settlements brought meanwhile is there too. Else, after a refusal,
    refused; after a grant that fell short of it, again — at most :data:`GRANT_ROUNDS` grants —
    and otherwise per request. Draws on ``lease`` for the admitted ones."""
    turns = []
    for w in waiting:
        if w.limits != lease.limits:
            turns.append(Turn.PER_REQUEST)
        elif lease.take(w.tokens, now):
            turns.append(Turn.ADMITTED)
        elif grant is None:
            turns.append(Turn.WAIT)
        elif grant is Grant.REFUSED:
            turns.append(Turn.REFUSED)
        elif grant is Grant.GRANTED and w.rounds + 1 < GRANT_ROUNDS:
            turns.append(Turn.AGAIN)
        else:
            turns.append(Turn.PER_REQUEST)
    return turns
