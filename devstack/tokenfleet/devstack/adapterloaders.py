"""The adapter-loader sidecars of simulated worker pods: one process each, beside the simulator.

The node agent starts a pod's sidecar (``python -m tokenfleet.worker.adapters``, the worker
image's code) once the pod's simulator runs, bound to ``podIP:8002`` and pointed at the
simulator's private port; stops it with the simulator (a restarted engine forgets its adapters,
so a fresh sidecar's empty list is the truth); and restarts one that exits, after the same
crash back-off a kubelet applies. Each pod's adapters and trust key live in its own directory.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Protocol

from tokenfleet.devstack import processes, simulated
from tokenfleet.kubeapi import ApiError, Obj

log = logging.getLogger("tokenfleet.devstack.adapterloaders")


class Mount(Protocol):
    """Writes a Secret's key into a file, as a kubelet mounts it (the node agent's)."""

    def __call__(self, pod: Obj, *, secret: str, key: str, target: Path) -> Awaitable[None]: ...


@dataclasses.dataclass(slots=True, kw_only=True)
class _Running:
    spec: simulated.AdapterLoaderSpec
    child: processes.Child


class AdapterLoaders:
    """pod uid → its running sidecar, with the exits and back-off of each."""

    def __init__(self, *, workdir: Path, logs: Path) -> None:
        self._workdir = workdir
        self._logs = logs
        self._running: dict[str, _Running] = {}
        self._exits: dict[str, int] = {}
        self._not_before: dict[str, float] = {}  # uid → monotonic time of the next start

    def trust_file(self, spec: simulated.AdapterLoaderSpec) -> Path:
        """Where the pod's trust key goes (what a kubelet would mount)."""
        return self._workdir / spec.pod_uid / "trust" / (spec.secret_key or "public.pem")

    def wants_start(self, uid: str, *, now: float) -> bool:
        """Not running, and past its back-off."""
        return uid not in self._running and now >= self._not_before.get(uid, 0.0)

    def start(
        self, spec: simulated.AdapterLoaderSpec, *, engine_port: int, public_key: Path | None
    ) -> None:
        env = spec.process_env(
            engine_url=f"http://127.0.0.1:{engine_port}",
            adapter_dir=self._workdir / spec.pod_uid / "adapters",
            public_key=public_key,
        )
        child = processes.spawn(
            f"adapter-loader {spec.pod_key}",
            [sys.executable, "-m", "tokenfleet.worker.adapters"],
            log=self._logs / f"{spec.pod_key.replace('/', '_')}.log",
            env=env,
        )
        self._running[spec.pod_uid] = _Running(spec=spec, child=child)
        log.info("started adapter-loader for %s at %s:%d", spec.pod_key, spec.pod_ip, spec.port)

    def reap(self, *, now: float) -> list[str]:
        """Forget sidecars that exited, scheduling their restart; returns their pod uids."""
        gone = [uid for uid, r in self._running.items() if not r.child.alive()]
        for uid in gone:
            running = self._running.pop(uid)
            exits = self._exits.get(uid, 0) + 1
            self._exits[uid] = exits
            self._not_before[uid] = now + processes.restart_delay(exits)
            log.warning(
                "adapter-loader of %s exited (%d times); restarting in %.0f s:\n%s",
                running.spec.pod_key,
                exits,
                processes.restart_delay(exits),
                running.child.tail(3),
            )
        return gone

    async def keep(
        self, engines: Mapping[str, tuple[Obj, int]], *, mount: Mount, now: float
    ) -> None:
        """Start the sidecar of every pod in ``engines`` (uid → (pod, its simulator's private
        port)) that has one and lacks it, after its back-off; ``mount`` writes the trust key a
        kubelet would mount (a Secret it cannot read holds the start back, as a kubelet's
        missing volume holds the container)."""
        self.reap(now=now)
        for uid, (pod, engine_port) in engines.items():
            spec = simulated.adapter_loader_spec(pod)
            if spec is None or not self.wants_start(uid, now=now):
                continue
            public_key = self.trust_file(spec) if spec.secret else None
            if public_key is not None:
                try:
                    await mount(pod, secret=spec.secret, key=spec.secret_key, target=public_key)
                except (ApiError, KeyError, ValueError) as exc:
                    log.warning("adapter trust of %s unreadable: %s", spec.pod_key, exc)
                    self._not_before[uid] = now + processes.restart_delay(1)
                    continue
            self.start(spec, engine_port=engine_port, public_key=public_key)

    def stop(self, uid: str) -> processes.Child | None:
        """Take the pod's sidecar out (the caller stops the process: it may block)."""
        running = self._running.pop(uid, None)
        return running.child if running is not None else None

    def forget(self, uids: set[str]) -> None:
        """Drop the back-off of pods that are gone."""
        for uid in set(self._exits) | set(self._not_before):
            if uid not in uids:
                self._exits.pop(uid, None)
                self._not_before.pop(uid, None)

    def close(self) -> list[processes.Child]:
        """Every sidecar's process, for the agent to stop on its way out."""
        children = [r.child for r in self._running.values()]
        self._running.clear()
        return children
