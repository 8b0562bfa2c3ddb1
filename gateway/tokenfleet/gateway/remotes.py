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

**A key is bound to where it may go.** The Secret must also hold :data:`BASE_URL_KEY`: the base
URL (or URLs, one per line) this key may be sent to; a remote whose ``baseUrl`` is not one of
them does not get it. It may hold :data:`NAMESPACES_KEY`: the namespaces (one per line) whose
ModelRoutes may use it; without it, any route may. Otherwise whoever may write a ModelRoute
could point a route at their own server and name another team's key: the platform team's list
of mounted Secrets would say which keys exist, not where they go.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tokenfleet.api.route import Remote

#: How long a key read from its file is used before the file is read again.
KEY_TTL_SECONDS = 30.0
#: Keys of a remote's Secret beside the token: where it may go, and for whom.
BASE_URL_KEY, NAMESPACES_KEY = "base-url", "namespaces"
#: A failed remote's first ejection, and the longest one.
EJECT_SECONDS, EJECT_MAX_SECONDS = 5.0, 30.0


@dataclasses.dataclass(slots=True)
class _Key:
    value: str | None  # None: the file is missing or empty
    urls: frozenset[str]  # where it may be sent (none: nowhere)
    namespaces: frozenset[str] | None  # whose routes may use it (None: any)
    read_at: float


def _lines(path: Path) -> frozenset[str] | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    return frozenset(line.strip().rstrip("/") for line in text.splitlines() if line.strip())


class Remotes:
    """Remote keys (cached file reads) and requests in flight per remote, in this process."""

    def __init__(self, keys_dir: Path) -> None:
        self.keys_dir = keys_dir
        self._keys: dict[Path, _Key] = {}
        self._in_flight: dict[tuple[str, str], int] = {}
        self._ejected: dict[tuple[str, str], tuple[float, float]] = {}  # → (until, for how long)

    def key_path(self, remote: Remote) -> Path:
        return self.keys_dir / remote.api_key_secret.name / remote.api_key_secret.key

    def _read(self, remote: Remote, now: float) -> _Key:
        path = self.key_path(remote)
        cached = self._keys.get(path)
        if cached is None or now - cached.read_at >= KEY_TTL_SECONDS:
            try:
                value: str | None = path.read_text().strip() or None
            except OSError:
                value = None
            cached = self._keys[path] = _Key(
                value=value,
                urls=_lines(path.parent / BASE_URL_KEY) or frozenset(),
                namespaces=_lines(path.parent / NAMESPACES_KEY),
                read_at=now,
            )
        return cached

    def problem(self, remote: Remote, *, namespace: str, now: float | None = None) -> str:
        """Why the remote gets no key for a route of ``namespace`` ("" when it does)."""
        found = self._read(remote, time.monotonic() if now is None else now)
        secret = remote.api_key_secret.name
        if found.value is None:
            return f"its key file {self.key_path(remote)} is missing or empty"
        if remote.base_url.rstrip("/") not in found.urls:
            return (
                f"Secret {secret} does not bind its key to {remote.base_url} (its "
                f"{BASE_URL_KEY!r} key must name that URL)"
            )
        if found.namespaces is not None and namespace not in found.namespaces:
            return f"Secret {secret} is not for routes of namespace {namespace or '(static)'!r}"
        return ""

    def key(self, remote: Remote, *, namespace: str, now: float | None = None) -> str | None:
        """The remote's bearer token for a route of ``namespace``, or None when its file is
        missing or empty, or its Secret does not let it go to the remote's URL or namespace."""
        if self.problem(remote, namespace=namespace, now=now):
            return None
        return self._read(remote, time.monotonic() if now is None else now).value

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
        until, last = self._ejected.get((route, remote.name), (0.0, 0.0))
        if now < until:  # requests that were already on their way: one failure, not several
            return last
        span = min(EJECT_MAX_SECONDS, last * 2 if last else EJECT_SECONDS)
        self._ejected[(route, remote.name)] = (now + span, span)
        return span

    def succeeded(self, route: str, remote: Remote) -> None:
        self._ejected.pop((route, remote.name), None)
