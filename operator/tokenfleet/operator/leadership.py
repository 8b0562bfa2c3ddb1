"""Leader election over a coordination.k8s.io Lease: one operator replica acts, the others wait.

Why a Lease and not kopf's peering: a Lease is what platform teams expect (kubectl shows the
holder; the RBAC is one namespaced object), it needs no extra CRD, and kopf's peering pauses
every operator of equal priority instead of electing one, with a 60 s lifetime.

Safety rests on two clocks that never need to agree: the holder stops acting ``renew_deadline``
after the start of its last successful renewal; a candidate takes over only ``lease_seconds``
after it *first saw* that renewal (monotonic time, so wall clocks may differ). Since it saw it
after the renewal started, the takeover comes at least ``lease_seconds - renew_deadline``
(two renewal periods) after the old leader stopped. A Lease that was missing is never trusted
at once: whoever creates it waits ``lease_seconds`` first (a leader whose Lease was deleted
may not have noticed yet). A leader that loses the Lease stops its work and the process exits,
so no write from a stale in-memory view can follow.

The decision core (:func:`observe`, :func:`decide`, :func:`after_write`, :func:`acting`) is pure;
:class:`Election` is the shell that reads and writes the Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import enum
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import kubernetes
from kubernetes.client import V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from tokenfleet.operator.k8s import Kube

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """How long a claim lasts and how often it is renewed (seconds)."""

    lease_seconds: float = 10.0
    renew_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.lease_seconds < 3 * self.renew_seconds or self.renew_seconds <= 0:
            raise ValueError("lease_seconds must be at least 3 x renew_seconds (> 0)")

    @property
    def renew_deadline(self) -> float:
        """The holder stops acting this long after its last successful renewal started."""
        return self.lease_seconds - 2 * self.renew_seconds

    @property
    def retry_seconds(self) -> float:
        """A candidate looks at the Lease this often (twice per renewal: quicker takeover)."""
        return self.renew_seconds / 2


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseView:
    """What the election reads of a Lease."""

    holder: str
    version: str  # resourceVersion: changes on every renewal
    lease_seconds: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class State:
    """One replica's memory of the election (monotonic seconds)."""

    seen_version: str = ""
    seen_at: float = 0.0  # when seen_version was first seen
    renewed_at: float | None = None  # start of our last successful write as the holder
    acting_from: float = 0.0  # no acting before this (the wait after creating the Lease)


class Action(enum.Enum):
    CREATE = "create"  # no Lease: create it, holding it
    RENEW = "renew"  # ours: renew it
    TAKE = "take"  # released or expired: write ourselves in as the holder
    WAIT = "wait"  # someone else's, still valid


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    action: Action
    reason: str


def observe(state: State, lease: LeaseView | None, now: float) -> State:
    """Remember when the Lease's current version was first seen (its expiry counts from then)."""
    version = lease.version if lease else ""
    if version == state.seen_version:
        return state
    return dataclasses.replace(state, seen_version=version, seen_at=now)


def decide(*, state: State, lease: LeaseView | None, me: str, now: float) -> Step:
    """What to do with the Lease as it is now (``state`` already updated by :func:`observe`)."""
    if lease is None:
        return Step(Action.CREATE, "no Lease yet")
    if lease.holder == me:
        return Step(Action.RENEW, "we hold it")
    if not lease.holder:
        return Step(Action.TAKE, "released by its last holder")
    unchanged = now - state.seen_at
    if unchanged >= lease.lease_seconds:
        return Step(Action.TAKE, f"{lease.holder} has not renewed for {unchanged:.1f} s")
    return Step(Action.WAIT, f"held by {lease.holder}")


def after_write(*, state: State, step: Step, started: float, timing: Timing) -> State:
    """Our write as the holder succeeded; ``started`` is when it was sent."""
    if step.action is Action.CREATE:
        acting_from = started + timing.lease_seconds
    elif step.action is Action.RENEW and state.renewed_at is not None:
        acting_from = state.acting_from
    else:  # taken over (its holder stopped before it expired), or renewed after a restart
        acting_from = started
    return dataclasses.replace(state, renewed_at=started, acting_from=acting_from)


def lost(state: State) -> State:
    """The Lease is no longer ours (a conflict or it vanished): stop acting at once."""
    return dataclasses.replace(state, renewed_at=None)


def acting(state: State, now: float, timing: Timing) -> bool:
    """May this replica act now?"""
    return (
        state.renewed_at is not None
        and now < state.renewed_at + timing.renew_deadline
        and now >= state.acting_from
    )


def next_wake(state: State, now: float, timing: Timing) -> float:
    """Seconds until the next look at the Lease: a renewal, a retry, the deadline or the wait's
    end, whichever is first (so acting starts and stops on time)."""
    if state.renewed_at is None:
        return timing.retry_seconds
    moments = [state.renewed_at + timing.renew_seconds, state.renewed_at + timing.renew_deadline]
    if state.acting_from > now:
        moments.append(state.acting_from)
    return max(0.0, min(moments) - now)


# ---------------------------------------------------------------------------------------------
# The shell: reads and writes the Lease, runs the work while acting, stops the operator after.


def _micro_now() -> datetime.datetime:
    """Now, for a MicroTime field: the client serializes it with isoformat(), which drops the
    fraction when it is zero, and the API server then refuses it; never zero, then."""
    now = datetime.datetime.now(datetime.UTC)
    return now.replace(microsecond=now.microsecond or 1)


class Election:
    """Holds or waits for one Lease; :meth:`lead` runs the work only while this replica leads."""

    def __init__(
        self, *, namespace: str, name: str, identity: str, timing: Timing, stop: threading.Event
    ) -> None:
        self.namespace, self.name, self.identity, self.timing = namespace, name, identity, timing
        self.stop = stop  # set when leadership is lost: the operator then exits
        self.lost_leadership = False
        self._state = State()
        self._api: kubernetes.client.CoordinationV1Api | None = None

    def acting(self) -> bool:
        """Thread-safe (reads one immutable snapshot): the fence writes are checked against."""
        return acting(self._state, time.monotonic(), self.timing)

    def _coordination(self) -> kubernetes.client.CoordinationV1Api:
        if self._api is None:  # the configuration Kube.connect loaded (in-cluster or kubeconfig)
            self._api = kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient())
        return self._api

    def _read(self) -> tuple[LeaseView | None, V1Lease | None]:
        try:
            lease = self._coordination().read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.timing.renew_seconds
            )
        except ApiException as exc:
            if exc.status == 404:
                return None, None
            raise
        spec, meta = lease.spec or V1LeaseSpec(), lease.metadata or V1ObjectMeta()
        view = LeaseView(
            holder=str(spec.holder_identity or ""),
            version=str(meta.resource_version or ""),
            lease_seconds=float(spec.lease_duration_seconds or self.timing.lease_seconds),
        )
        return view, lease

    def _write(self, step: Step, lease: V1Lease | None) -> bool:
        """Write ourselves in as the holder; False when someone else won (409) or it vanished.
        A replace carries the read resourceVersion, so of two candidates only one succeeds."""
        api, now = self._coordination(), _micro_now()
        seconds = int(self.timing.lease_seconds)
        try:
            if step.action is Action.CREATE or lease is None:
                spec = V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=seconds,
                    acquire_time=now,
                    renew_time=now,
                    lease_transitions=0,
                )
                body = V1Lease(metadata=V1ObjectMeta(name=self.name), spec=spec)
                api.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self.timing.renew_seconds
                )
                return True
            spec = lease.spec or V1LeaseSpec()
            if step.action is Action.TAKE:
                spec.acquire_time = now
                spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.holder_identity, spec.lease_duration_seconds, spec.renew_time = (
                self.identity,
                seconds,
                now,
            )
            lease.spec = spec
            api.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self.timing.renew_seconds
            )
            return True
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise

    async def _step(self) -> None:
        """One look at the Lease, and a write when ours to make. Failures keep the state: the
        deadline, not an error, decides when a leader stops."""
        try:
            lease_view, lease = await asyncio.to_thread(self._read)
            now = time.monotonic()
            state = observe(self._state, lease_view, now)
            step = decide(state=state, lease=lease_view, me=self.identity, now=now)
            if step.action is not Action.WAIT:
                started = time.monotonic()
                won = await asyncio.to_thread(self._write, step, lease)
                state = (
                    after_write(state=state, step=step, started=started, timing=self.timing)
                    if won
                    else lost(state)
                )
                if step.action is not Action.RENEW and won:
                    log.info(
                        "leader election: %s holds %s (%s)", self.identity, self.name, step.reason
                    )
            self._state = state
        except Exception as exc:  # the API server unreachable: the deadline decides
            log.warning("leader election: could not read or renew Lease %s: %s", self.name, exc)

    async def lead(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Keep looking at the Lease; run ``work`` while acting; on losing the Lease stop it and
        set :attr:`stop` (the process exits rather than return to waiting with stale state)."""
        task: asyncio.Task[None] | None = None
        try:
            while True:
                await self._step()
                now = time.monotonic()
                leading = acting(self._state, now, self.timing)
                if leading and task is None:
                    log.info("leader election: %s is the leader: acting", self.identity)
                    task = asyncio.create_task(work())
                elif not leading and task is not None:
                    log.error(
                        "leader election: %s lost Lease %s: stopping", self.identity, self.name
                    )
                    self.lost_leadership = True
                    self.stop.set()
                    return
                if task is not None and task.done():
                    task.result()  # the work failed: let it propagate
                await asyncio.sleep(next_wake(self._state, time.monotonic(), self.timing) or 0.05)
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def release(self) -> None:
        """On a graceful stop, after the work stopped: hand the Lease over at once."""
        if self._state.renewed_at is None:
            return
        self._state = lost(self._state)
        try:
            view, lease = await asyncio.to_thread(self._read)
            if view is None or lease is None or lease.spec is None or view.holder != self.identity:
                return
            lease.spec.holder_identity = None  # released: the next candidate takes it at once
            lease.spec.lease_duration_seconds = 1
            await asyncio.to_thread(
                self._coordination().replace_namespaced_lease, self.name, self.namespace, lease
            )
            log.info("leader election: %s released Lease %s", self.identity, self.name)
        except Exception as exc:  # it then expires instead
            log.warning("leader election: could not release Lease %s: %s", self.name, exc)


class NotLeader(RuntimeError):
    """A write was attempted while this replica does not lead (refused before it is sent)."""


def fenced_kube(election: Election, *, namespaces: tuple[str, ...] = ()) -> Kube:
    """The operator's Kubernetes client, refusing every write unless ``election`` is acting:
    the last guard between a replica that just lost its Lease and the API server."""

    class FencedKube(Kube):
        def _once(
            self,
            method: str,
            path: str,
            *,
            body: Any,
            content_type: str,
            query: list[tuple[str, str]],
        ) -> Any:
            if method != "GET" and not election.acting():
                raise NotLeader(f"{method} {path}: not the leader")
            return super()._once(method, path, body=body, content_type=content_type, query=query)

    return FencedKube.connect(namespaces=namespaces)
