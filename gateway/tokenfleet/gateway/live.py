"""The catalog as requests read it now: one immutable value, swapped whole, with what follows
from it (each pool's concurrency share in this process) and an event that fires on every swap
(requests held for a cold start wait on it).

Every stage that reads the catalog holds this one object, not a copy: a swap is seen by the
next read, and a reader never sees half an update.
"""

from __future__ import annotations

import asyncio

from tokenfleet.gateway.catalog import Catalog
from tokenfleet.gateway.policy import admission
from tokenfleet.gateway.targets import Target


class Live:
    """The current catalog of one gateway process (touched only from its event loop)."""

    __slots__ = ("capacities", "catalog", "changed", "loaded", "processes")

    def __init__(self, *, processes: int) -> None:
        self.catalog = Catalog()
        self.loaded = False  # the first full catalog (models, tenants, endpoints) arrived
        self.changed = asyncio.Event()
        """Set (and replaced) on every swap: requests held for a cold start wait on it."""
        self.capacities: dict[str, int] = {}  # pool → this process's concurrency share
        self.processes = processes  # gateway processes sharing the engines' slots

    def set_processes(self, processes: int) -> bool:
        """The fleet's registry counted ``processes`` sharing the slots: every pool's share is
        computed again. Returns whether the count changed."""
        if processes == self.processes:
            return False
        self.processes = processes
        self.capacities = {
            key: admission.share(capacity(self.catalog, key), processes=processes)
            for key in self.catalog.pools
        }
        return True

    def swap(self, catalog: Catalog) -> None:
        """Replace the catalog whole, and wake whoever waits for a change."""
        self.catalog = catalog
        self.capacities = {
            key: admission.share(capacity(catalog, key), processes=self.processes)
            for key in catalog.pools
        }
        self.loaded = True
        self.changed.set()
        self.changed = asyncio.Event()

    def capacity(self, pool: str) -> int:
        """This process's share of the requests the pool's ready endpoints take at once
        (computed once per catalog): every gateway process admits its share, so together
        they never put more in flight than the engines have slots."""
        return self.capacities.get(pool, 0)

    def ready(self, to: Target | None) -> bool:
        """Whether ``to`` has a ready replica in the current catalog."""
        if to is None:
            return False
        return bool(self.catalog.endpoints.group(to.model.name, pool=to.pool.key))


def capacity(catalog: Catalog, pool: str) -> int:
    """Requests the pool's ready endpoints take at once."""
    return sum(e.max_concurrency for e in catalog.endpoints.endpoints if e.pool == pool)
