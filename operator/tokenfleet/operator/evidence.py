"""Gathers the canary gate's evidence beyond latency (a shell): custom PromQL checks and
throughput with each latency analysis, and the golden-set replay as a background task.

A replay runs once per stable/canary pair, as an asyncio task that the reconcile loop never
waits for: each pass looks whether it has finished and hands its answers to the planner,
until status holds the pair's verdict (then nothing runs again for that pair, also after an
operator restart).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.operator import replay
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import canary, gate, observed
from tokenfleet.operator.policy import analysis, rollout
from tokenfleet.operator.signals_source import PrometheusSignals
from tokenfleet.signals import queries

log = logging.getLogger("tokenfleet.operator.evidence")


@dataclasses.dataclass(slots=True)
class _Running:
    pair: tuple[str, str]
    task: asyncio.Task[gate.Replay]


class GateEvidence:
    """Per-process memory of replays in flight, keyed by namespace/name."""

    def __init__(self, *, kube: Kube, signals: PrometheusSignals | None) -> None:
        self.kube = kube
        self.signals = signals
        self._replays: dict[str, _Running] = {}

    async def gather(
        self,
        *,
        namespace: str,
        name: str,
        spec: ModelDeploymentSpec,
        status: ModelDeploymentStatus | None,
        latency: analysis.Judgment | None,
        pods: Sequence[observed.WorkerPod],
        window: int,
    ) -> gate.Evidence:
        """This pass's evidence; the measurements ride with the latency analysis (when due)."""
        state = canary.state_of(status)
        measured = latency is not None and self.signals is not None
        return gate.Evidence(
            latency=latency,
            checks=await self._checks(namespace, spec, state, window) if measured else None,
            throughput=await self._throughput(namespace, spec, state, window) if measured else None,
            replay=self._replay(f"{namespace}/{name}", spec=spec, status=status, pods=pods),
        )

    async def _value(self, query: str) -> float | None:
        if self.signals is None:
            return None
        return await asyncio.to_thread(self.signals.revision_value, query)

    async def _checks(
        self, namespace: str, spec: ModelDeploymentSpec, state: rollout.State, window: int
    ) -> tuple[analysis.CheckValue, ...]:
        out = []
        for check in spec.rollout.analysis.checks:
            values = [
                await self._value(
                    queries.substituted(
                        check.query,
                        namespace=namespace,
                        model=spec.model.name,
                        revision=revision,
                        window=f"{window}s",
                    )
                )
                for revision in (state.canary, state.stable)
            ]
            out.append(
                analysis.CheckValue(
                    name=check.name,
                    canary=values[0],
                    stable=values[1],
                    max=check.max,
                    min=check.min,
                )
            )
        return tuple(out)

    async def _throughput(
        self, namespace: str, spec: ModelDeploymentSpec, state: rollout.State, window: int
    ) -> dict[str, float | None]:
        return {
            revision: await self._value(
                queries.revision_tokens_per_replica(
                    namespace, spec.model.name, revision, f"{window}s"
                )
            )
            for revision in (state.stable, state.canary)
            if revision
        }

    def _replay(
        self,
        key: str,
        *,
        spec: ModelDeploymentSpec,
        status: ModelDeploymentStatus | None,
        pods: Sequence[observed.WorkerPod],
    ) -> gate.Replay | None:
        """A finished replay for the current pair; starts one when none is known yet."""
        quality = spec.rollout.analysis.quality
        state = canary.state_of(status)
        live = state.phase in (rollout.Phase.PROGRESSING, rollout.Phase.PAUSED)
        pair = (state.stable, state.canary)
        recorded = status.rollout.quality if status and status.rollout else None
        decided = recorded is not None and recorded.verdict != "Pending"
        if (
            quality is None
            or not live
            or (
                decided
                and recorded
                and (recorded.stable_revision, recorded.canary_revision) == pair
            )
        ):
            self._forget(key)
            return None
        running = self._replays.get(key)
        if running is not None and running.pair != pair:
            self._forget(key)
            running = None
        if running is None:
            targets = [_addresses(pods, revision) for revision in pair]
            if not all(targets):
                return None  # a revision has no ready engine yet: next pass
            task = asyncio.create_task(
                replay.replay(
                    self.kube,
                    namespace=key.split("/", 1)[0],
                    model=spec.model.name,
                    spec=quality,
                    stable=(pair[0], targets[0]),
                    canary=(pair[1], targets[1]),
                ),
                name=f"golden-replay {key}",
            )
            self._replays[key] = _Running(pair=pair, task=task)
            return None
        return self._finished(key, running)

    def _finished(self, key: str, running: _Running) -> gate.Replay | None:
        if not running.task.done():
            return None
        failure = None if running.task.cancelled() else running.task.exception()
        if running.task.cancelled() or failure is not None:
            log.warning("golden replay for %s failed: %r; retrying", key, failure)
            self._replays.pop(key, None)
            return None
        return running.task.result()

    def _forget(self, key: str) -> None:
        running = self._replays.pop(key, None)
        if running is not None and not running.task.done():
            running.task.cancel()


def _addresses(pods: Sequence[observed.WorkerPod], revision: str) -> list[str]:
    return sorted(
        p.address
        for p in pods
        if p.revision == revision and p.ready and not p.terminating and p.address
    )
