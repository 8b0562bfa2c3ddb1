"""The node agent: a kubelet stand-in for simulated nodes.

For every Running worker pod on a simulated node that is Ready, it runs one llm-d-inference-sim
process and a TCP forwarder from ``podIP:port`` to it, and marks the pod Ready only once a tiny
chat completion through that address succeeds. When the pod goes away, its node is deleted or
goes NotReady, the simulator stops. A simulator that exits is reported (pod NotReady) and
restarted, as a kubelet restarts a crashed container. A pod whose address it cannot listen on
(another pod or process holds it) gets no engine, ``Ready=False`` with reason ``CannotListen``
and the error, and a Warning Event, and is retried with the same back-off. Other pods on
simulated nodes are marked Ready at once, as kwok would.

Every worker pod that declares an artifact (as every ModelDeployment's do) first has it
verified exactly as the worker image's verify step would (tokenfleet.signing, with the trust
Secret read from the API where a kubelet would mount it): no opt-in. The verdict, pass or not,
goes where a kubelet keeps the verify init container's: its termination message in the pod's
status (the record the operator reads), and, for kubectl users, the ``tokenfleet.io/verdict``
annotation; a refused pod stays NotReady with the verdict's reason and gets no simulator, as
its engine would never start.

A worker pod with an ``adapter-loader`` container also gets that sidecar as a process beside
its simulator, on ``podIP:8002`` (tokenfleet.devstack.adapterloaders): stopped with the
simulator, restarted when it exits.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp

from tokenfleet.api import labels
from tokenfleet.devstack import adapterloaders, podstatus, processes, simulated, termination
from tokenfleet.kubeapi import ApiError, KubeApi, Obj
from tokenfleet.signing.verdict import Reason, Verdict

log = logging.getLogger("tokenfleet.devstack.nodeagent")

PROBE_INTERVAL_SECONDS = 0.5
PROBE_TIMEOUT_SECONDS = 2.0
AGENT_NAME = "tokenfleet-node-agent"  # the source of the Events it records


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod_path(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


def _is_ready(obj: Obj) -> bool:
    conditions: list[Obj] = obj.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _verify_blocking(
    check: simulated.ArtifactCheck, public_key: Path | None, workdir: Path
) -> Verdict:
    """The worker entrypoint's verification, in a thread: importing model_signing (sigstore)
    and hashing weights must not stall the agent's event loop."""
    from tokenfleet.signing import verify

    try:
        trust = verify.Trust(public_key=public_key, identity=check.identity, issuer=check.issuer)
    except ValueError as exc:
        return Verdict(reason=Reason.UNTRUSTED_SIGNER, message=str(exc))
    verdict, _ = verify.verify_artifact(
        check.uri,
        trust=trust,
        expected_digest=check.digest,
        signature_uri=check.signature_uri,
        workdir=workdir,
    )
    return verdict


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@dataclasses.dataclass(slots=True, kw_only=True)
class RunningSim:
    """A simulator process and the forwarder that makes it reachable at the pod's IP."""

    spec: simulated.SimSpec
    child: processes.Child
    server: asyncio.Server
    listen: int  # the simulator's private port on 127.0.0.1
    ready: bool = False
    probe: asyncio.Task[None] | None = None


class NodeAgent:
    """Watches nodes and pods; keeps one simulator per eligible pod."""

    def __init__(self, *, api: KubeApi, sim_binary: Path, logs: Path) -> None:
        self._api = api
        self._sim_binary = sim_binary
        self._logs = logs
        self._nodes: dict[str, bool] = {}  # simulated node name → Ready
        self._pods: dict[str, Obj] = {}  # uid → pod on a simulated node
        self._sims: dict[str, RunningSim] = {}
        self._crashes: dict[str, int] = {}  # pod uid → consecutive simulator exits
        self._not_before: dict[str, float] = {}  # pod uid → monotonic time of the next start
        self._wake = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._verdicts: dict[str, Verdict] = {}  # pod uid → artifact verdict (opted-in pods)
        self._verifying: dict[str, asyncio.Task[None]] = {}
        self._terminations = termination.Terminations(api)  # preStop, SIGTERM, SIGKILL
        self._loaders = adapterloaders.AdapterLoaders(
            workdir=logs / "adapter-loaders", logs=logs / "adapter-loaders" / "logs"
        )

    async def run(self) -> None:
        """Reconcile until cancelled; stops every simulator on the way out."""
        self._session = aiohttp.ClientSession()
        watches = [
            asyncio.create_task(self._watch_nodes()),
            asyncio.create_task(self._watch_pods()),
        ]
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=1.0)
                self._wake.clear()
                await self._reconcile()
        finally:
            for task in [*watches, *self._verifying.values()]:
                task.cancel()
            leaving = list(self._sims.values())  # all at once: one deadline, not one each
            self._sims.clear()
            for sim in leaving:
                sim.server.close()
            # not in a worker thread: at shutdown the pool may be busy (verifications) and this
            # must not queue behind it; blocking the loop for the grace period is fine now
            children = [s.child for s in leaving] + self._loaders.close()
            children += self._terminations.close()
            processes.stop(children, grace_seconds=5.0)
            await self._session.close()

    def simulators(self) -> dict[str, simulated.SimSpec]:
        """Pod key → running simulator (for status output and tests)."""
        return {s.spec.pod_key: s.spec for s in self._sims.values()}

    async def _watch_nodes(self) -> None:
        async for kind, node in self._api.list_watch(
            "/api/v1/nodes", selector=f"{labels.SIMULATED_NODE}=true"
        ):
            if kind == "SYNCED":
                continue
            name = node["metadata"]["name"]
            if kind == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = _is_ready(node)
            self._wake.set()

    async def _watch_pods(self) -> None:
        async for kind, pod in self._api.list_watch("/api/v1/pods"):
            if kind == "SYNCED":
                continue
            uid = pod["metadata"]["uid"]
            if kind == "DELETED":
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = pod
            self._wake.set()

    async def _reconcile(self) -> None:
        wanted: dict[str, simulated.SimSpec] = {}
        for uid, pod in list(self._pods.items()):
            node = pod.get("spec", {}).get("nodeName", "")
            if node not in self._nodes:
                continue
            if self._deleting_worker(uid) and uid not in self._sims:
                self._terminations.start(pod, child=None, server=None, url="")  # no engine
                continue
            spec = simulated.sim_spec(pod) if self._nodes[node] else None
            if spec is not None:
                wanted[uid] = spec
            elif (
                not simulated.is_worker(pod)
                and pod.get("status", {}).get("phase") == "Running"
                and not _is_ready(pod)
                and self._nodes[node]
            ):
                await self._set_ready(pod, ready=True, reason="NoEngine")
        for uid in list(self._sims):
            sim = self._sims[uid]
            if self._deleting_worker(uid):  # like a kubelet: preStop, SIGTERM, SIGKILL, delete
                await self._hand_over(uid)
            elif wanted.get(uid) != sim.spec:
                await self._stop(uid)
            elif not sim.child.alive():
                crashes = self._crashes.get(uid, 0) + 1
                delay = processes.restart_delay(crashes)
                log.warning(
                    "simulator of %s exited (%d times); restarting in %.0f s:\n%s",
                    sim.spec.pod_key,
                    crashes,
                    delay,
                    sim.child.tail(3),
                )
                self._crashes[uid] = crashes
                self._not_before[uid] = time.monotonic() + delay
                await self._stop(uid)
                if uid in self._pods:
                    await self._set_ready(self._pods[uid], ready=False, reason="EngineExited")
        for uid, spec in wanted.items():
            due = time.monotonic() >= self._not_before.get(uid, 0.0)
            if uid not in self._sims and due and self._verified(uid):
                await self._start(spec)
        await self._keep_adapter_loaders()
        self._forget_gone_pods()

    def _deleting_worker(self, uid: str) -> bool:
        pod = self._pods.get(uid)
        deleting = pod is not None and pod["metadata"].get("deletionTimestamp")
        return bool(deleting and simulated.is_worker(pod or {}) and uid not in self._terminations)

    async def _hand_over(self, uid: str) -> None:
        sim = self._sims.pop(uid)
        if sim.probe is not None:
            sim.probe.cancel()
        await self._stop_adapter_loader(uid)
        url = f"http://{sim.spec.pod_ip}:{sim.spec.port}"
        self._terminations.start(self._pods[uid], child=sim.child, server=sim.server, url=url)

    def _forget_gone_pods(self) -> None:
        for uid in set(self._crashes) - set(self._pods):
            self._crashes.pop(uid, None)
            self._not_before.pop(uid, None)
        for uid in set(self._verdicts) - set(self._pods):
            self._verdicts.pop(uid, None)
        self._loaders.forget(set(self._pods))

    def _verified(self, uid: str) -> bool:
        """True when the pod may start: no verification asked, or its artifact verified.

        Starts the verification (in a thread: hashing weights takes a while) on first sight.
        A pod deleted while this pass awaited (a namespace going away) does not start.
        """
        pod = self._pods.get(uid)
        if pod is None:
            return False
        check = simulated.artifact_check(pod)
        if check is None:
            return True
        verdict = self._verdicts.get(uid)
        if verdict is None and uid not in self._verifying:
            task = asyncio.create_task(self._verify(uid, check))
            self._verifying[uid] = task
            task.add_done_callback(lambda _: self._verifying.pop(uid, None))
        return verdict is not None and verdict.verified

    async def _verify(self, uid: str, check: simulated.ArtifactCheck) -> None:
        pod = self._pods.get(uid)
        if pod is None:
            return
        verdict = await self._run_verification(pod, check)
        self._verdicts[uid] = verdict
        log.info("artifact of %s: %s %s", _pod_path(pod), verdict.reason, verdict.message)
        await self._record(pod, verdict)
        if not verdict.verified:
            await self._set_ready(pod, ready=False, reason=str(verdict.reason))
        self._wake.set()

    async def _record(self, pod: Obj, verdict: Verdict) -> None:
        """Where a kubelet keeps the verify init container's verdict (the status the operator
        reads), and, for kubectl users, the tokenfleet.io/verdict annotation (never read by
        the operator: anyone who may patch the pod may write it)."""
        text = verdict.to_json()
        status = podstatus.verify_step_patch(
            pod, message=text, verified=verdict.verified, now=_now()
        )
        try:
            if status is not None:
                await self._api.patch_status(_pod_path(pod), status)
            await self._api.call(
                "PATCH",
                _pod_path(pod),
                body={"metadata": {"annotations": {labels.VERDICT: text}}},
                content_type="application/merge-patch+json",
            )
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot record the verdict of %s: %s", _pod_path(pod), exc)

    async def _run_verification(self, pod: Obj, check: simulated.ArtifactCheck) -> Verdict:
        uid = pod["metadata"]["uid"]
        public_key: Path | None = None
        if check.secret:
            public_key = self._logs / "trust" / f"{uid}.pem"
            try:
                await self._write_secret_key(
                    pod, secret=check.secret, key=check.secret_key, target=public_key
                )
            except (ApiError, KeyError, ValueError) as exc:
                return Verdict(
                    reason=Reason.UNTRUSTED_SIGNER,
                    message=f"trust Secret {check.secret}/{check.secret_key} unreadable: {exc}",
                )
        workdir = self._logs / "artifacts" / uid
        return await asyncio.to_thread(_verify_blocking, check, public_key, workdir)

    async def _write_secret_key(self, pod: Obj, *, secret: str, key: str, target: Path) -> None:
        """What a kubelet would mount: the Secret's key, decoded, in a file."""
        namespace = pod["metadata"]["namespace"]
        found = await self._api.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{secret}")
        data = base64.b64decode(found["data"][key], validate=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    async def _start(self, spec: simulated.SimSpec) -> None:
        listen = processes.free_port()

        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", listen)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))

        try:  # first: a pod whose address is taken gets no engine, as its container could not bind
            server = await asyncio.start_server(forward, spec.pod_ip, spec.port, reuse_address=True)
        except OSError as exc:
            await self._cannot_listen(spec, exc)
            return
        name = spec.pod_key.replace("/", "_")
        child = processes.spawn(
            f"sim {spec.pod_key}",
            spec.argv(str(self._sim_binary), listen),
            log=self._logs / "sims" / f"{name}.log",
            env=spec.env(),
        )
        sim = RunningSim(spec=spec, child=child, server=server, listen=listen)
        sim.probe = asyncio.create_task(self._probe_until_ready(spec.pod_uid, sim))
        self._sims[spec.pod_uid] = sim
        log.info("started simulator for %s at %s:%s", spec.pod_key, spec.pod_ip, spec.port)

    async def _keep_adapter_loaders(self) -> None:
        """Each running simulator whose pod has an adapter-loader gets it beside it."""
        engines = {
            uid: (self._pods[uid], sim.listen)
            for uid, sim in self._sims.items()
            if uid in self._pods
        }
        await self._loaders.keep(engines, mount=self._write_secret_key, now=time.monotonic())

    async def _stop_adapter_loader(self, uid: str) -> None:
        child = self._loaders.stop(uid)
        if child is not None:
            await asyncio.to_thread(processes.stop, [child], grace_seconds=3.0)

    async def _cannot_listen(self, spec: simulated.SimSpec, exc: OSError) -> None:
        """Say so in the pod's status and an Event; retry with the crash back-off (a failure to
        listen counts as an engine exit, as a container that cannot bind its port exits)."""
        address = f"{spec.pod_ip}:{spec.port}"
        log.error("cannot listen on %s for %s: %s", address, spec.pod_key, exc)
        failures = self._crashes.get(spec.pod_uid, 0) + 1
        self._crashes[spec.pod_uid] = failures
        delay = processes.restart_delay(failures)
        self._not_before[spec.pod_uid] = time.monotonic() + delay
        pod = self._pods.get(spec.pod_uid)
        if pod is None:
            return
        message = podstatus.cannot_listen_message(address, exc.strerror or str(exc))
        await self._set_ready(pod, ready=False, reason=podstatus.CANNOT_LISTEN, message=message)
        event = podstatus.warning_event(
            pod, reason=podstatus.CANNOT_LISTEN, message=message, now=_now(), source=AGENT_NAME
        )
        try:
            await self._api.call(
                "POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/events", body=event
            )
        except ApiError as exc_:
            log.warning("cannot record an event for %s: %s", spec.pod_key, exc_)

    async def _stop(self, uid: str) -> None:
        sim = self._sims.pop(uid)
        if sim.probe is not None:
            sim.probe.cancel()
        sim.server.close()
        await self._stop_adapter_loader(uid)  # a restarted engine has no adapters: nor will it
        await asyncio.to_thread(processes.stop, [sim.child], grace_seconds=3.0)
        log.info("stopped simulator for %s", sim.spec.pod_key)

    async def _probe_until_ready(self, uid: str, sim: RunningSim) -> None:
        """Ready means loaded and answering: a one-token chat completion must succeed."""
        assert self._session is not None
        url = f"http://{sim.spec.pod_ip}:{sim.spec.port}/v1/chat/completions"
        body: dict[str, Any] = {
            "model": (sim.spec.served_names or (sim.spec.model,))[0],
            "messages": [{"role": "user", "content": "ping"}],
            "max_tokens": 1,
        }
        timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_SECONDS)
        await asyncio.sleep(sim.spec.cold_start_seconds)  # the simulated weight load
        while sim.child.alive():
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with self._session.post(url, json=body, timeout=timeout) as resp:
                    if resp.status == 200:
                        sim.ready = True
                        break
            await asyncio.sleep(PROBE_INTERVAL_SECONDS)
        pod = self._pods.get(uid)
        if sim.ready and pod is not None:
            await self._set_ready(pod, ready=True, reason="EngineAnswering")

    async def _set_ready(self, pod: Obj, *, ready: bool, reason: str, message: str = "") -> None:
        patch = podstatus.readiness_patch(
            pod, ready=ready, reason=reason, now=_now(), message=message
        )
        try:
            await self._api.patch_status(_pod_path(pod), patch)
        except ApiError as exc:
            if exc.status != 404:  # a pod deleted meanwhile needs no status
                log.warning("cannot set Ready=%s on %s: %s", ready, _pod_path(pod), exc)
