"""ModelDeployments: each model's status — its rollout, its canary's gate, its verification.

gather (the model fitted to its pools; its pods, minus the refused ones restarted to verify
again; the trust fingerprint and recheck; the gate's evidence, with a canary analysis when due)
→ plan (plan.model_status) → act (restart workers whose refusal no longer stands) → report.
The pools' reconciler applies the model's workers; this one owns the model's own status."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from tokenfleet.api import labels
from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator import evidence
from tokenfleet.operator.config import OperatorConfig
from tokenfleet.operator.k8s import Kube
from tokenfleet.operator.plan import canary, model_status, observed, verification
from tokenfleet.operator.policy import analysis, rollout, signal_health
from tokenfleet.operator.reconcilers import guard, indexed, pool_claims
from tokenfleet.operator.reconcilers.status_writer import StatusWriter
from tokenfleet.operator.signals_source import PrometheusSignals
from tokenfleet.signals import jobs

log = logging.getLogger("tokenfleet.operator")


class ModelReconciler:
    def __init__(
        self,
        *,
        kube: Kube,
        indexes: indexed.Indexes,
        config: OperatorConfig,
        signals: PrometheusSignals | None,
        writer: StatusWriter,
    ) -> None:
        self.kube = kube
        self.indexes = indexes
        self.config = config
        self.signals = signals
        self.writer = writer
        self.analysed: dict[str, float] = {}  # uid → unix seconds of last analysis
        # model uid → its refused pods whose workers were restarted to verify again, until the
        # index drops them: until a replacement shows in the index, nothing else marks them stale
        self.reverifying: dict[str, set[str]] = {}
        self.gate = evidence.GateEvidence(kube=kube, signals=signals)

    async def reconcile(
        self,
        *,
        owners: dict[tuple[str, str], str],
        specs: Mapping[tuple[str, str], InferencePoolSpec],
        now: datetime.datetime,
    ) -> None:
        for body in list(indexed.bodies(self.indexes.models)):
            await guard.guarded(body, self._reconcile_model(body, owners, specs, now))

    def retain(self, live: set[str]) -> None:
        """Forget what this process remembers of models deleted since (uids not in ``live``)."""
        for held in (self.analysed, self.reverifying):
            for uid in held.keys() - live:  # deleted: forget it
                del held[uid]

    async def _reconcile_model(
        self,
        body: dict[str, Any],
        owners: dict[tuple[str, str], str],
        specs: Mapping[tuple[str, str], InferencePoolSpec],
        now: datetime.datetime,
    ) -> None:
        meta = body["metadata"]
        ns = meta["namespace"]
        spec = ModelDeploymentSpec.model_validate(body.get("spec", {}))
        fit = pool_claims.fit(spec, ns, specs, self.config.allowed_images)
        spec = fit.spec
        existing = frozenset(n for (pool_ns, n) in self.indexes.pools if pool_ns == ns)
        current = indexed.status_of(ModelDeploymentStatus, body)
        pods = self._not_reverifying(
            meta["uid"],
            [p for pool in spec.pools for p in indexed.items(self.indexes.pods, (ns, pool))],
        )
        trust, recheck = await self._recheck(body, spec, current, pods)
        gathered = await self.gate.gather(
            namespace=ns,
            name=meta["name"],
            spec=spec,
            status=current,
            latency=await self._analyse(body, spec, now),
            pods=pods,
            window=self._window(spec),
        )
        status, events = model_status.plan_model(
            model_status.ModelInputs(
                namespace=ns,
                name=meta["name"],
                generation=meta.get("generation"),
                spec=spec,
                status=current,
                existing_pools=existing,
                pool_owner={
                    pool: owner for (pool_ns, pool), owner in owners.items() if pool_ns == ns
                },
                pods=pods,
                now=now,
                evidence=gathered,
                trust=trust,
                recheck=recheck,
                fit=fit,
                allowed_images=self.config.allowed_images,
            )
        )
        await self.writer.report(body, "ModelDeployment", status.to_wire(), events, now)

    async def _recheck(
        self,
        body: dict[str, Any],
        spec: ModelDeploymentSpec,
        status: ModelDeploymentStatus | None,
        pods: list[observed.WorkerPod],
    ) -> tuple[str | None, verification.Recheck]:
        """This pass's trust fingerprint, and whether a refusal of the spec's revision still
        stands; restarts its workers when not (before status says so: a failed patch is tried
        again next pass)."""
        ns = body["metadata"]["namespace"]
        trust = await self._trust(ns, spec, status)
        recheck = verification.plan(
            namespace=ns,
            spec=spec,
            status=status,
            pods=pods,
            sets=[s for pool in spec.pools for s in indexed.items(self.indexes.sets, (ns, pool))],
            current=trust,
        )
        await self._reverify(body, recheck)
        return trust, recheck

    async def _trust(
        self, ns: str, spec: ModelDeploymentSpec, status: ModelDeploymentStatus | None
    ) -> str | None:
        """The trust fingerprint, with the Secret read only while the spec's revision is new
        or refused (plan.verification.needs_trust); None when not read or unreadable."""
        key = spec.artifact.trust.public_key
        if key is None:
            return verification.fingerprint(spec.artifact.trust, None)
        if not verification.needs_trust(spec, status):
            return None
        try:
            pem = await asyncio.to_thread(self.kube.trust_key, ns, key.name, key.key)
        except ApiException as exc:  # decide nothing on it; the next pass reads again
            log.warning("cannot read trust Secret %s/%s: %s", ns, key.name, exc.reason)
            return None
        return verification.fingerprint(spec.artifact.trust, pem)

    async def _reverify(self, body: dict[str, Any], recheck: verification.Recheck) -> None:
        """Restart the revision's workers whose refusal no longer stands: their new pods verify
        against the trust as it is now."""
        if not recheck.decision.reverify:
            return
        meta = body["metadata"]
        log.info(
            "ModelDeployment %s/%s: revision %s: %s; restarting %s to verify again",
            meta["namespace"],
            meta["name"],
            recheck.revision,
            recheck.detail,
            ", ".join(recheck.restart) or "no worker Deployment yet",
        )
        for deployment in recheck.restart:
            await asyncio.to_thread(
                self.kube.restart,
                meta["namespace"],
                deployment,
                labels.TRUST_FINGERPRINT,
                recheck.decision.fingerprint,
            )
        self.reverifying.setdefault(meta["uid"], set()).update(recheck.stale)

    def _not_reverifying(
        self, uid: str, pods: list[observed.WorkerPod]
    ) -> list[observed.WorkerPod]:
        """The pods without the refused ones this process restarted (forgotten once the index
        no longer lists them)."""
        restarted = self.reverifying.get(uid)
        if not restarted:
            return pods
        restarted.intersection_update(p.name for p in pods)
        return [p for p in pods if p.name not in restarted]

    async def _analyse(
        self, body: dict[str, Any], spec: ModelDeploymentSpec, now: datetime.datetime
    ) -> analysis.Judgment | None:
        """Canary against stable from Prometheus, once per analysis interval while a canary
        takes traffic; None when not due, or when Prometheus did not answer (no verdict)."""
        meta = body["metadata"]
        ns, key = meta["namespace"], meta["uid"]
        current = indexed.status_of(ModelDeploymentStatus, body)
        state = canary.state_of(current)
        live = state.phase in (rollout.Phase.PROGRESSING, rollout.Phase.PAUSED)
        interval = spec.rollout.analysis.interval_seconds
        at = now.timestamp()
        remembered = self.analysed.get(key, 0.0)  # status may lag this process's own write
        due = canary.analysis_due(current, now=at, interval=interval, remembered=remembered)
        if self.signals is None or not live or not due:
            return None
        self.analysed[key] = at
        window = self._window(spec)
        samples = [
            await asyncio.to_thread(
                self.signals.canary_sample, ns, spec.model.name, name, window_seconds=window
            )
            for name in (state.canary, state.stable)
        ]
        if samples[0] is None or samples[1] is None:
            return None
        judgment = analysis.judge(samples[0], samples[1], canary.thresholds_of(spec.rollout))
        if judgment.outcome is rollout.Outcome.INSUFFICIENT_SAMPLES:  # say why it waits
            targets = await asyncio.to_thread(self.signals.targets)
            if targets is not None:
                problems = {
                    job: signal_health.job_problem(job, targets.get(job)) for job in jobs.ALL
                }
                judgment = analysis.explained(judgment, problems)
        # every interval: debug only; status.rollout.lastAnalysis and Events carry the news
        log.debug("ModelDeployment %s: canary %s: %s", key, state.canary, judgment.message)
        return judgment

    def _window(self, spec: ModelDeploymentSpec) -> int:
        """Seconds an analysis measures over: the configured window, or the interval if longer."""
        return round(
            max(spec.rollout.analysis.interval_seconds, self.config.analysis_window_seconds)
        )
