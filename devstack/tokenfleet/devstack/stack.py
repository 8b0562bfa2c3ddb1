"""Run the whole local stack in this process: control plane, simulated nodes, CRDs, node agent.

One stack per state directory: a lock file held for the stack's lifetime makes a second start
report the running one instead. Readiness is announced by writing ``stack.json`` (ports,
kubeconfig, pid); it is removed on a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import aiohttp
import yaml

from tokenfleet.devstack import (
    chart,
    controlplane,
    jaeger,
    nodes,
    pki,
    platform,
    processes,
    prometheus,
    real_engine,
    realnode,
    reboot,
    remotes,
)
from tokenfleet.devstack.controlplane import Files, Ports
from tokenfleet.devstack.kwokstages import STAGES
from tokenfleet.devstack.nodeagent import NodeAgent
from tokenfleet.devstack.realnode_host import RealNode, RealNodeError
from tokenfleet.kubeapi import ApiError, KubeApi

log = logging.getLogger("tokenfleet.devstack")

REPO = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet"))
HEALTH_TIMEOUT_SECONDS = 90.0
AGENT_STOP_SECONDS = 20.0  # its simulators get 5 s of grace; the rest is margin
#: Stopped last and one at a time: every client first, then the API server (while its storage
#: still answers, so it drains in a second instead of retrying etcd until it is killed), then etcd.
STOPPED_LAST = ("kube-apiserver", "etcd")


class StackError(Exception):
    """The stack cannot start; the message says what to do."""


@dataclasses.dataclass(slots=True)
class _ExitedDuringStartup(Exception):
    """A component stopped before it was healthy; ``output`` is what it wrote this time."""

    child: processes.Child
    output: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """How to run a stack."""

    state_dir: Path
    bin_dir: Path
    ports: Ports | None = None  # None: pick free ports (tests)
    shape: nodes.NodeShape = dataclasses.field(default_factory=nodes.NodeShape)
    crds_dir: Path = REPO / "crds"
    operator: bool = False  # also run the TokenFleet operator (tests run their own)
    platform: bool = False  # also the operator, Redis, the gateway, a dev tenant and the examples
    real_node: bool = False  # also one real kubelet node (containerd + runc; root, one per machine)
    #: simulator, or vllm-cpu: also a CPU pool of real vLLM pods on the real node (example 10)
    engine: str = real_engine.SIMULATOR
    images_dir: Path = dataclasses.field(default_factory=lambda: CACHE / "images" / "current")


def lock_path(state_dir: Path) -> Path:
    return state_dir / "stack.lock"


def info_path(state_dir: Path) -> Path:
    return state_dir / "stack.json"


@contextlib.contextmanager
def held_lock(state_dir: Path) -> Iterator[IO[str]]:
    """Hold the state directory's lock, or raise StackError naming the stack that holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = lock_path(state_dir).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StackError(
            f"a stack is already running from {state_dir} (see {info_path(state_dir)})"
        ) from None
    try:
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        yield handle
    finally:
        handle.close()


def running_pid(state_dir: Path) -> int | None:
    """The pid of the stack holding this state directory's lock, or None."""
    return lock_holder(lock_path(state_dir))


def lock_holder(path: Path) -> int | None:
    """The pid written in a lock file whose flock is held (-1 when unreadable), or None when
    nobody holds it: a state directory's lock, or the real node's machine-wide one."""
    if not path.exists():
        return None
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def free_pod_octet() -> int:
    """A second octet for pod IPs that no other stack on this host is using: tests run beside a
    developer's `make up`, and two stacks must not hand out the same loopback address."""
    for octet in range(2, 255):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:  # the first pod of the first node would listen here
                s.bind((f"127.{octet}.1.1", 8000))
            except OSError:
                continue
        if not any(f"127.{octet}." in line for line in _listening()):
            return octet
    raise StackError("no free 127.N.0.0/16 pod network left on this host")


def _listening() -> list[str]:
    """Local addresses of listening TCP sockets (from /proc, no tools needed)."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":  # LISTEN
            address = bytes.fromhex(local.split(":")[0])[::-1]
            out.append(".".join(str(b) for b in address) + ".")
    return out


def free_ports() -> Ports:
    return Ports(**{f.name: processes.free_port() for f in dataclasses.fields(Ports)})


def check_ports(ports: Ports) -> None:
    """Fail with the component's name if one of its ports is taken."""
    taken = []
    for name, port in ports.named().items():
        with socket.socket() as s:
            # As the servers themselves do: connections in TIME_WAIT must not count as "taken".
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                taken.append(f"{port} ({name.replace('_', '-')})")
    if taken:
        raise StackError(
            f"port {', '.join(taken)} already in use by another program. Stop it "
            "(`ss -ltnp` shows who holds it) or set TOKENFLEET_PORTS=auto to pick free ports."
        )


class Stack:
    """The running stack; :meth:`run` starts everything and serves until cancelled."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.ports = options.ports or free_ports()
        self.files = Files(root=options.state_dir)
        self._children: list[processes.Child] = []
        self.real_node: RealNode | None = None
        self.remote_urls: dict[str, str] = {}  # remote → base URL, once started

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    async def run(self, stop: asyncio.Event) -> None:
        """Start, announce readiness, serve until ``stop`` is set, tear down."""
        started = time.monotonic()
        self._check_engine()
        try:
            token = self._prepare_files()
            async with aiohttp.ClientSession() as session:
                api = await self._start_control_plane(token, session)
                if self.options.real_node:
                    await self._start_real_node(api)
                await asyncio.to_thread(self._apply_crds)
                await self._start_prometheus(token, session)
                await self._start_jaeger(token, session)
                agent = NodeAgent(
                    api=api,
                    sim_binary=self.options.bin_dir / "llm-d-inference-sim",
                    logs=self.files.logs,
                )
                agent_task = asyncio.create_task(agent.run())
                if self.options.platform and self.real_node is not None:
                    await self._install_chart(token, session)
                else:  # the operator and gateway as host processes
                    if self.options.operator or self.options.platform:
                        await asyncio.to_thread(self._start_operator)
                    if self.options.platform:
                        await self._start_platform(session)
                self._announce(started)
                await stop.wait()
                log.info("stopping")
                agent_task.cancel()
                # bounded: the control plane must go down even if the agent's teardown hangs
                _, pending = await asyncio.wait({agent_task}, timeout=AGENT_STOP_SECONDS)
                if pending:
                    log.warning("node agent still stopping after %.0f s", AGENT_STOP_SECONDS)
        finally:
            info_path(self.options.state_dir).unlink(missing_ok=True)
            if self.real_node is not None:  # first: its kubelet still reaches the API server
                await asyncio.to_thread(self.real_node.stop)
            self._stop_children()
            log.info("stopped")

    def _check_engine(self) -> None:
        problem = real_engine.refusal(
            self.options.engine,
            real_node=self.options.real_node,
            platform=self.options.platform,
            present=Path.exists,
        )
        if problem is not None:
            raise StackError(problem)

    async def _start_control_plane(self, token: str, session: aiohttp.ClientSession) -> KubeApi:
        """The control plane and its nodes; kwok last, once no pod of an earlier run is left
        (see tokenfleet.devstack.reboot: else kwok hands their addresses out again)."""
        components = controlplane.components(self.options.bin_dir, self.ports, self.files)
        for component in components:
            if component.name != "kwok":
                await self._start(component, token, session)
        # the API server has written its serving certificate by now: verify it from here on
        self._write_kubeconfig(token)
        api = KubeApi.from_kubeconfig(self.files.kubeconfig, session)
        await self._create_nodes(api)
        ours = {n["metadata"]["name"] for n in nodes.manifests(self.options.shape)}
        await reboot.delete_earlier_pods(api, nodes=ours)
        for component in components:
            if component.name == "kwok":
                await self._start(component, token, session)
        return api

    def _stop_children(self) -> None:
        leaving = list(reversed(self._children))
        processes.stop([c for c in leaving if c.name not in STOPPED_LAST])
        for name in STOPPED_LAST:
            processes.stop([c for c in leaving if c.name == name])

    def _prepare_files(self) -> str:
        for folder in (self.files.pki, self.files.logs, self.files.etcd_data):
            folder.mkdir(parents=True, exist_ok=True)
        self.files.etcd_data.chmod(0o700)
        pki.write_service_account_key(self.files.service_account_key)
        token = pki.write_token_file(self.files.tokens)
        ca = pki.write_ca(self.files.pki)
        cert, key = self.files.kubelet_client
        pki.issue_client_cert(
            ca,
            common_name="kube-apiserver-kubelet-client",
            groups=("system:masters",),
            out=pki.CertPair(cert=cert, key=key),
        )
        self._write_kubeconfig(token)
        self.files.kwok_config.write_text(STAGES)
        return token

    @property
    def api_ca(self) -> Path:
        """The API server's self-signed serving certificate (it writes it on first start)."""
        return self.files.pki / "apiserver.crt"

    def _write_kubeconfig(self, token: str) -> None:
        self.files.kubeconfig.write_text(
            pki.kubeconfig(server=self.server, token=token, ca=self.api_ca)
        )
        self.files.kubeconfig.chmod(0o600)

    async def _start(
        self, component: controlplane.Component, token: str, session: aiohttp.ClientSession
    ) -> None:
        binary = Path(component.argv[0])
        if not binary.exists():
            raise StackError(f"{binary} is missing: run tools/build.sh (make up does) first")
        for attempt in range(1, controlplane.STARTUP_RACE_ATTEMPTS + 1):
            try:
                await self._start_once(component, token, session)
                return
            except _ExitedDuringStartup as exc:
                raced = controlplane.crashed_in_known_startup_race(component.name, exc.output)
                if not raced or attempt == controlplane.STARTUP_RACE_ATTEMPTS:
                    raise StackError(
                        f"{component.name} exited during start-up:\n{exc.child.tail()}"
                    ) from None
                log.warning(
                    "%s crashed in a known start-up race (see its log); starting it again",
                    component.name,
                )

    async def _start_once(
        self, component: controlplane.Component, token: str, session: aiohttp.ClientSession
    ) -> None:
        logfile = self.files.logs / f"{component.name}.log"
        written_before = logfile.stat().st_size if logfile.exists() else 0
        child = processes.spawn(component.name, component.argv, log=logfile, env=component.env)
        self._children.append(child)
        headers = {"Authorization": f"Bearer {token}"} if component.needs_token else {}
        no_verify = ssl.create_default_context()
        no_verify.check_hostname, no_verify.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
        log.info("starting %s", component.name)
        while time.monotonic() < deadline:
            if not child.alive():
                self._children.remove(child)
                with logfile.open("rb") as f:
                    f.seek(written_before)
                    output = f.read().decode(errors="replace")
                raise _ExitedDuringStartup(child=child, output=output)
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.get(
                    component.health_url,
                    headers=headers,
                    ssl=no_verify,
                    timeout=aiohttp.ClientTimeout(total=2),
                ) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.2)
        raise StackError(
            f"{component.name} not healthy after {HEALTH_TIMEOUT_SECONDS:.0f} s:\n{child.tail()}"
        )

    async def _create_nodes(self, api: KubeApi) -> None:
        for node in nodes.manifests(self.options.shape):
            status = node.pop("status")
            try:
                await api.call("POST", "/api/v1/nodes", body=node)
            except ApiError as exc:
                if exc.status != 409:  # exists from an earlier run of this state directory
                    raise
            # Capacity lives in status, which a create ignores.
            await api.patch_status(f"/api/v1/nodes/{node['metadata']['name']}", status)

    async def _start_real_node(self, api: KubeApi) -> None:
        self.real_node = RealNode(
            state_dir=self.options.state_dir,
            bin_dir=self.options.bin_dir,
            images_dir=self.options.images_dir,
            logs=self.files.logs,
        )
        ca = pki.CertPair(cert=self.files.ca_cert, key=self.files.pki / "ca.key")
        try:
            # The API server's self-signed serving bundle: the kubelet verifies the server.
            await self.real_node.start(api=api, server=self.server, ca=ca, api_ca=self.api_ca)
        except RealNodeError as exc:
            raise StackError(str(exc)) from None

    def _apply_crds(self) -> None:
        kubectl = str(self.options.bin_dir / "kubectl")
        env = {**os.environ, "KUBECONFIG": str(self.files.kubeconfig)}
        for argv in (
            # --force-conflicts: the chart (field manager helm) installed the previous version
            # of these CRDs on a platform started before; the repository's are the truth now
            # (docs/install.md: upgrade the CRDs first, with the same flag)
            [
                kubectl,
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                str(self.options.crds_dir),
            ],
            [
                kubectl,
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                str(self.options.crds_dir),
            ],
        ):
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise StackError(f"{' '.join(argv[1:3])} failed: {done.stderr.strip()}")

    async def _start_prometheus(self, token: str, session: aiohttp.ClientSession) -> None:
        """The shipped scrape jobs and rules (tokenfleet.devstack.prometheus), every 1 s,
        discovering pods through this stack's API server."""
        folder = self.options.state_dir / "prometheus"
        folder.mkdir(parents=True, exist_ok=True)
        rules = folder / "rules.yaml"
        rules.write_text(prometheus.rules())
        config = folder / "prometheus.yml"
        # Always: the real node's host-network pods (the chart's operator, gateway, Redis) are
        # scraped on loopback, never at the machine's own address their pod IP names.
        loopback = prometheus.loopback_relabelings(
            node=realnode.NODE_NAME, bridge_prefix=realnode.SUBNET.rsplit(".", 1)[0] + "."
        )
        config.write_text(
            prometheus.config(
                kubeconfig=self.files.kubeconfig, rule_files=[rules], loopback=loopback
            )
        )
        argv = prometheus.argv(
            bin_dir=self.options.bin_dir,
            config_file=config,
            data_dir=folder / "data",
            port=self.ports.prometheus,
        )
        health = f"http://127.0.0.1:{self.ports.prometheus}/-/ready"
        await self._start(
            controlplane.Component(name="prometheus", argv=argv, health_url=health), token, session
        )

    async def _start_jaeger(self, token: str, session: aiohttp.ClientSession) -> None:
        """The trace backend the gateway's spans go to (tokenfleet.devstack.jaeger)."""
        folder = self.options.state_dir / "jaeger"
        folder.mkdir(parents=True, exist_ok=True)
        ports = jaeger.Ports.of(self.ports)
        argv = jaeger.argv(self.options.bin_dir / "jaeger", folder / "jaeger.yaml", ports)
        await self._start(
            controlplane.Component(name="jaeger", argv=argv, health_url=jaeger.health_url(ports)),
            token,
            session,
        )

    def _register_host_process(self, job: str, port: int) -> None:
        """A host process as the Pod Prometheus' pod discovery finds (see prometheus.py)."""
        node = nodes.manifests(self.options.shape)[0]["metadata"]["name"]
        pod = prometheus.host_pod(job=job, name=f"local-{job}", port=port, node=node)
        self._kubectl("apply", "-f", "-", stdin=json.dumps(pod))

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl as the admin user."""
        argv = [str(self.options.bin_dir / "kubectl"), *args]
        env = {**os.environ, "KUBECONFIG": str(self.files.kubeconfig)}
        done = subprocess.run(
            argv, env=env, input=stdin, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise StackError(f"kubectl {' '.join(args[:2])} failed: {done.stderr.strip()}")
        return done.stdout

    def _start_operator(self) -> None:
        """The operator with the least-privilege account of manifests/operator, as in a cluster."""
        self._kubectl("apply", "-k", str(REPO / "manifests" / "operator"))
        token = self._kubectl(
            "create", "token", "tokenfleet-operator", "-n", "tokenfleet-system", "--duration=720h"
        ).strip()
        config = self.options.state_dir / "operator.kubeconfig"
        config.write_text(
            pki.kubeconfig(
                server=self.server, token=token, user="tokenfleet-operator", ca=self.api_ca
            )
        )
        config.chmod(0o600)
        metrics_port = processes.free_port()
        self._children.append(
            processes.spawn(
                "tokenfleet-operator",
                [sys.executable, "-m", "tokenfleet.operator"],
                log=self.files.logs / "operator.log",
                env={
                    "KUBECONFIG": str(config),
                    "TOKENFLEET_PROMETHEUS_URL": f"http://127.0.0.1:{self.ports.prometheus}",
                    "TOKENFLEET_METRICS_PORT": str(metrics_port),
                    # The operator's own adapter verification reaches only what the platform
                    # serves: the examples' file:// copies and the artifact server on the bridge
                    # (values-local.yaml says the same for the chart's operator).
                    "TOKENFLEET_ADAPTER_FILE_ROOTS": "/tmp/tokenfleet-examples",  # noqa: S108
                    "TOKENFLEET_ADAPTER_FETCH_ALLOW": "10.250.0.1/32",
                },
            )
        )
        self._register_host_process("tokenfleet-operator", metrics_port)

    def _account_kubeconfig(self, component: str) -> Path:
        """RBAC of manifests/<component> (not its Deployment: it runs here as a process) and a
        kubeconfig with that account's token."""
        self._kubectl("apply", "-k", str(REPO / "manifests" / "base" / "namespace"))
        self._kubectl("apply", "-f", str(REPO / "manifests" / component / "rbac.yaml"))
        account = f"tokenfleet-{component}"
        token = self._kubectl(
            "create", "token", account, "-n", "tokenfleet-system", "--duration=720h"
        ).strip()
        config = self.options.state_dir / f"{component}.kubeconfig"
        config.write_text(
            pki.kubeconfig(server=self.server, token=token, user=account, ca=self.api_ca)
        )
        config.chmod(0o600)
        return config

    async def _start_platform(self, session: aiohttp.ClientSession) -> None:
        """Redis, the gateway, the dev tenant with its key, and the examples to call."""
        await self._start_remotes(session)
        redis = processes.spawn(
            "redis", platform.redis_argv(self.ports.redis), log=self.files.logs / "redis.log"
        )
        self._children.append(redis)
        config = await asyncio.to_thread(self._account_kubeconfig, "gateway")
        gateway = platform.gateway_component(
            state_dir=self.options.state_dir,
            kubeconfig=config,
            port=self.ports.gateway,
            redis_port=self.ports.redis,
            traces_url=jaeger.Ports.of(self.ports).otlp_traces_url,
        )
        await self._start(gateway, "", session)
        await asyncio.to_thread(
            self._register_host_process, "tokenfleet-gateway", self.ports.gateway
        )
        await self._dev_tenant_and_examples()

    async def _install_chart(self, token: str, session: aiohttp.ClientSession) -> None:
        """The operator, gateway and Redis as the chart's pods on the real node."""
        await self._start_remotes(session)  # first: the gateway's pods mount their key Secrets
        argv = chart.helm_argv(
            helm=self.options.bin_dir / "helm",
            chart=REPO / "charts" / "tokenfleet",
            images=self.options.images_dir,
            ports=self.ports,
            health_port=processes.free_port(),
            metrics_port=processes.free_port(),
        )
        env = {**os.environ, "KUBECONFIG": str(self.files.kubeconfig)}
        log.info("installing the chart onto %s", realnode.NODE_NAME)
        done = await asyncio.to_thread(
            subprocess.run, argv, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise StackError(f"helm upgrade --install failed: {done.stderr.strip()}")
        health = f"http://127.0.0.1:{self.ports.gateway}/healthz"
        await self._wait_healthy("tokenfleet-gateway (chart)", health, session)
        await self._dev_tenant_and_examples()
        if self.options.engine == real_engine.VLLM_CPU:
            await self._real_engine_example(session)

    async def _real_engine_example(self, session: aiohttp.ClientSession) -> None:
        """Example 10 as its README runs it: the artifact server on the pod bridge, the model
        set's trust Secret, the CPU pool and its ModelDeployment (real vLLM pods start)."""
        models = real_engine.models_dir()
        argv = real_engine.artifact_server_argv(models)
        health = f"{real_engine.ARTIFACT_URL}/{real_engine.MODEL}/config.json"
        server = controlplane.Component(name="artifact-server", argv=argv, health_url=health)
        await self._start(server, "", session)
        example = REPO / "examples" / real_engine.EXAMPLE
        await asyncio.to_thread(
            self._kubectl,
            "apply",
            "-f",
            str(models / "trust-secret.yaml"),
            "-f",
            str(models / "golden-set.yaml"),
            "-f",
            str(example / "inferencepool.yaml"),
            "-f",
            str(example / "modeldeployment.yaml"),
        )

    async def _start_remotes(self, session: aiohttp.ClientSession) -> None:
        """Region-b and the provider as host processes (tokenfleet.devstack.remotes), and
        their key Secrets in the gateway's namespace."""
        planned = remotes.plan(
            state_dir=self.options.state_dir,
            bin_dir=self.options.bin_dir,
            ports=self.ports,
            examples=REPO / "examples",
        )
        for component in planned.components:
            await self._start(component, "", session)
        self.remote_urls = planned.urls
        namespace = str(REPO / "manifests" / "base" / "namespace")
        await asyncio.to_thread(self._kubectl, "apply", "-k", namespace)
        listed = remotes.key_secrets(self.options.state_dir, chart.NAMESPACE)
        await asyncio.to_thread(self._kubectl, *remotes.APPLY, stdin=json.dumps(listed))

    async def _wait_healthy(self, name: str, url: str, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.5)
        raise StackError(f"{name} not healthy at {url} after {HEALTH_TIMEOUT_SECONDS:.0f} s")

    async def _dev_tenant_and_examples(self) -> None:
        await asyncio.to_thread(self._kubectl, "apply", "-f", "-", stdin=platform.DEV_TENANT_YAML)
        await platform.ensure_dev_key(self.options.state_dir, self.files.kubeconfig)
        examples = REPO / "examples"
        await asyncio.to_thread(_place_artifact_02, examples / "02-model-deployment")
        await asyncio.to_thread(
            self._kubectl,
            "apply",
            "-f",
            str(examples / "01-three-zone-pool"),
            "-f",
            str(examples / "02-model-deployment"),
        )

    def _announce(self, started: float) -> None:
        info: dict[str, Any] = {
            "pid": os.getpid(),
            "kubeconfig": str(self.files.kubeconfig),
            "server": self.server,
            "ports": self.ports.named(),
            "podNetwork": f"127.{self.options.shape.pod_octet}.0.0/16",
            "prometheus": f"http://127.0.0.1:{self.ports.prometheus}",
            "jaeger": jaeger.Ports.of(self.ports).query_url,
            "startSeconds": round(time.monotonic() - started, 2),
            "realNode": realnode.NODE_NAME if self.real_node is not None else None,
            "engine": self.options.engine,
            "children": {c.name: c.popen.pid for c in self._children},
            "remotes": self.remote_urls,
        }
        path = info_path(self.options.state_dir)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=2))
        tmp.replace(path)
        log.info("stack ready in %.1f s", info["startSeconds"])


def _place_artifact_02(example: Path) -> None:
    """Example 02's README step: its signed tiny-chat/ copied where the manifest's URI points
    (the node agent, and the real node's worker, read it from there)."""
    manifest = yaml.safe_load((example / "modeldeployment.yaml").read_text())
    uri: str = manifest["spec"]["artifact"]["uri"]
    shutil.copytree(example / "tiny-chat", Path(uri.removeprefix("file://")), dirs_exist_ok=True)


def serve(options: Options) -> None:
    """Run a stack in the foreground until SIGTERM or SIGINT."""
    with held_lock(options.state_dir):
        if options.ports is not None:
            check_ports(options.ports)

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await Stack(options).run(stop)

        asyncio.run(main())
