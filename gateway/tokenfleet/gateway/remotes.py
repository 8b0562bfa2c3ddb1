"""What one gateway process knows about ModelRoute remotes between requests: their keys, read
from the files the platform team mounted, how many requests each has from here now, and which
failed lately.

A remote that fails before answering is **ejected**: skipped for :data:`EJECT_SECONDS`, doubled
on each further failure up to :data:`EJECT_MAX_SECONDS`; once that passes, the next request
tries it again (a probe) and a success clears it. Without this, a lost region would be tried by
every spilled request, and the next remote reached only as a retry (within the retry budget: a
tenth of the requests); ejected, the next remote is the first try.

Keys are files ``<remote_keys_dir>/<secret>/<key>`` (the chart mounts each Secret listed in
``gateway.remoteKeySecrets`` there; kubelet swaps the files when a Secret changes). A key is
read at most every :data:`KEY_TTL_SECONDS` per file, so a rotated key is used within that time
and a spill costs no file read. A key is never logged, only whether it was found.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tokenfleet.api.route import Remote

#: How long a key read from its file is used before the file is read again.
KEY_TTL_SECONDS = 30.0
#: A failed remote's first ejection, and the longest one.
EJECT_SECONDS, EJECT_MAX_SECONDS = 5.0, 30.0


@dataclasses.dataclass(slots=True)
class _Key:
    value: str | None  # None: the file is missing or empty
    read_at: float


class Remotes:
    """Remote keys (cached file reads) and requests in flight per remote, in this process."""

    def __init__(self, keys_dir: Path) -> None:
        self.keys_dir = keys_dir
        self._keys: dict[Path, _Key] = {}
        self._in_flight: dict[tuple[str, str], int] = {}
        self._ejected: dict[tuple[str, str], tuple[float, float]] = {}  # → (until, for how long)

    def key_path(self, remote: Remote) -> Path:
        return self.keys_dir / remote.api_key_secret.name / remote.api_key_secret.key

    def key(self, remote: Remote, *, now: float | None = None) -> str | None:
        """The remote's bearer token, or None when its file is missing or empty."""
        now = time.monotonic() if now is None else now
        path = self.key_path(remote)
        cached = self._keys.get(path)
        if cached is None or now - cached.read_at >= KEY_TTL_SECONDS:
            try:
                value: str | None = path.read_text().strip() or None
            except OSError:
                value = None
            cached = self._keys[path] = _Key(value=value, read_at=now)
        return cached.value

    def take(self, route: str, remote: Remote) -> bool:
        """One more request for ``remote`` from this process; False (nothing taken) at its
        maxConcurrency."""
        slot = (route, remote.name)
        held = self._in_flight.get(slot, 0)
        if held >= remote.max_concurrency:
            return False
        self._in_flight[slot] = held + 1
        return True

    def release(self, route: str, remote: Remote) -> None:
        slot = (route, remote.name)
        self._in_flight[slot] = max(0, self._in_flight.get(slot, 0) - 1)

    def in_flight(self, route: str, remote: Remote) -> int:
        return self._in_flight.get((route, remote.name), 0)

    def ejected(self, route: str, remote: Remote, *, now: float) -> bool:
        """Failed lately: skipped until its ejection passes."""
        until, _ = self._ejected.get((route, remote.name), (0.0, 0.0))
        return now < until

    def failed(self, route: str, remote: Remote, *, now: float) -> float:
        """It failed before answering: ejected, for twice as long as last time (capped);
        returns for how long."""
        _, last = self._ejected.get((route, remote.name), (0.0, 0.0))
        span = min(EJECT_MAX_SECONDS, last * 2 if last else EJECT_SECONDS)
        self._ejected[(route, remote.name)] = (now + span, span)
        return span

    def succeeded(self, route: str, remote: Remote) -> None:
        self._ejected.pop((route, remote.name), None)
