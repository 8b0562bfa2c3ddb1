"""A simulated replica's LoRA adapter slots, as vLLM keeps them.

A replica holds at most ``max_loras`` adapters (``--max-loras``), loaded or loading for
``adapter_load_seconds``, least recently used first. An adapter without a slot takes one when
a request for it is admitted, evicting the least recently used adapter that no admitted request
uses and is not loading; with none to evict, the request must wait. So a running batch never
mixes more than ``max_loras`` adapters.
"""

from __future__ import annotations

import collections
import heapq

from tokenfleet.gateway.policy import adapters


class Slots:
    """One replica's adapters: their load ends, users and counters."""

    __slots__ = ("due", "evictions", "load_seconds", "loaded", "loads", "max_loras", "users")

    def __init__(self, max_loras: int, load_seconds: float) -> None:
        self.max_loras = max_loras
        self.load_seconds = load_seconds
        # adapter → when its load ends (past: loaded), least recently used first
        self.loaded: collections.OrderedDict[int, float] = collections.OrderedDict()
        self.users: dict[int, int] = {}  # admitted requests per adapter
        self.due: list[tuple[float, int]] = []  # heap of (load ends, adapter)
        self.loads = 0
        self.evictions = 0

    def has(self, adapter: int, now: float) -> bool:
        """Whether ``adapter`` is loaded (not merely loading) at ``now``."""
        ready = self.loaded.get(adapter)
        return ready is not None and ready <= now

    def admit(self, adapter: int, now: float) -> bool:
        """Whether a request for ``adapter`` can run from ``now`` (it then counts as a user);
        without a slot, take one and start the load (False until it ends), or, when every slot
        is loading or in use, False."""
        loaded = self.loaded
        ready = loaded.get(adapter)
        if ready is None:
            if len(loaded) >= self.max_loras:
                users = self.users
                victim = next((a for a, t in loaded.items() if t <= now and not users.get(a)), -1)
                if victim < 0:
                    return False  # every slot is loading or in use: wait for one
                del loaded[victim]
                self.evictions += 1
            ready = now + self.load_seconds
            loaded[adapter] = ready
            self.loads += 1
            if ready > now:
                heapq.heappush(self.due, (ready, adapter))
        loaded.move_to_end(adapter)
        if ready > now:
            return False
        self.users[adapter] = self.users.get(adapter, 0) + 1
        return True

    def release(self, adapter: int) -> None:
        """A request using ``adapter`` left the batch."""
        self.users[adapter] -= 1

    def next_load_end(self) -> float | None:
        return self.due[0][0] if self.due else None

    def loads_ended(self, now: float) -> bool:
        """Forget loads ended by ``now``; whether there were any (their waiters may start)."""
        due = self.due
        ended = False
        while due and due[0][0] <= now:
            heapq.heappop(due)
            ended = True
        return ended

    def clear(self) -> None:
        """The replica died: its adapters went with it (the counters stay)."""
        self.loaded.clear()
        self.users.clear()
        self.due.clear()

    def holder(self, *, url: str, load: int, now: float) -> adapters.Holder:
        """The replica as ``adapters.place`` sees it."""
        return adapters.Holder(
            url=url,
            load=load,
            adapters=tuple(self.loaded),
            in_use=frozenset(a for a, n in self.users.items() if n),
            loading=frozenset(a for a, t in self.loaded.items() if t > now),
            slots=self.max_loras,
        )
