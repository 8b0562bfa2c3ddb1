"""Command lines and health checks of the control plane's components (pure: values in, argv out).

Start order: etcd → kube-apiserver → kube-controller-manager → kube-scheduler → kwok. Flags are
the smallest set that works on a host with no default route, no container runtime and loopback
pod IPs; each unusual one says why.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tokenfleet.api import labels


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    """Loopback TCP ports of the control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    redis: int
    gateway: int
    prometheus: int
    region_b: int  # the remote region's gateway (tokenfleet.devstack.remotes)
    provider: int  # the OpenAI-compatible provider in front of its engine
    jaeger_otlp: int  # the trace backend (tokenfleet.devstack.jaeger): OTLP/HTTP in
    jaeger_query: int  # its query API and page
    jaeger_grpc: int  # its query service's gRPC side (unused, but it must listen somewhere)
    jaeger_health: int

    def shifted(self, offset: int) -> Ports:
        """Every port moved by ``offset`` (to run beside another stack)."""
        return Ports(**{name: port + offset for name, port in self.named().items()})

    def named(self) -> dict[str, int]:
        """Component → port, for reporting a port that is taken."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


#: Ports `make up` uses; tests pick free ones instead so that both can run at once.
DEFAULT_PORTS = Ports(
    etcd_client=23790,
    etcd_peer=23800,
    apiserver=6443,
    controller_manager=10257,
    scheduler=10259,
    kwok=10247,
    redis=26379,
    gateway=8080,
    prometheus=9090,
    region_b=8090,  # examples/09-model-routes/route.yaml's remotes name these two
    provider=8091,
    jaeger_otlp=4318,  # OpenTelemetry's and Jaeger's own defaults
    jaeger_query=16686,
    jaeger_grpc=16685,
    jaeger_health=13133,
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Files:
    """Where the control plane keeps its state under the stack's state directory."""

    root: Path

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def service_account_key(self) -> Path:
        return self.pki / "service-account.key"

    @property
    def tokens(self) -> Path:
        return self.pki / "tokens.csv"

    @property
    def ca_cert(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def kubelet_client(self) -> tuple[Path, Path]:
        """The API server's client certificate and key towards kubelets (logs, exec)."""
        return self.pki / "apiserver-kubelet-client.crt", self.pki / "apiserver-kubelet-client.key"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok-stages.yaml"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


def etcd(bin_dir: Path, ports: Ports, files: Files) -> list[str]:
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    client = f"http://127.0.0.1:{ports.etcd_client}"
    return [
        str(bin_dir / "etcd"),
        "--name=tokenfleet",
        f"--data-dir={files.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=tokenfleet={peer}",
        "--unsafe-no-fsync=true",  # a throwaway dev cluster: durability is not worth the latency
        "--log-level=warn",
    ]


def apiserver(bin_dir: Path, ports: Ports, files: Files) -> list[str]:
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",  # else start-up fails on a host with no default route
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={files.pki}",
        f"--token-auth-file={files.tokens}",
        # Client certificates of the stack's CA: the real node's kubelet (system:node:NAME),
        # authorized by the Node authorizer and confined to its own objects by NodeRestriction.
        f"--client-ca-file={files.ca_cert}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--kubelet-client-certificate={files.kubelet_client[0]}",
        f"--kubelet-client-key={files.kubelet_client[1]}",
        # The node's name resolves to 127.0.0.1 (a hosts entry); its InternalIP must not be dialled.
        "--kubelet-preferred-address-types=Hostname",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={files.service_account_key}",
        f"--service-account-signing-key-file={files.service_account_key}",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",  # the 'kubernetes' Service would point at loopback
        "--profiling=false",
    ]


def controller_manager(bin_dir: Path, ports: Ports, files: Files) -> list[str]:
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={files.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--service-account-private-key-file={files.service_account_key}",
        # The CA pods trust for the API server (kube-root-ca.crt): its self-signed serving bundle.
        f"--root-ca-file={files.pki / 'apiserver.crt'}",
        # EndpointSlices reject loopback pod IPs; the gateway watches pods instead.
        "--controllers=*,-endpoints-controller,-endpointslice-controller,"
        "-endpointslice-mirroring-controller",
        # kwok heartbeats every few seconds; a short grace period makes a lost zone visible fast.
        "--node-monitor-grace-period=20s",
        # The default 20 QPS throttles 200-pod rollouts to minutes; this is a one-host cluster.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--profiling=false",
    ]


def scheduler(bin_dir: Path, ports: Ports, files: Files) -> list[str]:
    return [
        str(bin_dir / "kube-scheduler"),
        f"--kubeconfig={files.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--profiling=false",
    ]


def kwok(bin_dir: Path, ports: Ports, files: Files) -> list[str]:
    return [
        str(bin_dir / "kwok"),
        f"--kubeconfig={files.kubeconfig}",
        # Only the simulated nodes: on a real kubelet's node kwok would overwrite its status and
        # force-delete its pods (no preStop).
        f"--manage-nodes-with-label-selector={labels.SIMULATED_NODE}=true",
        f"--config={files.kwok_config}",
        "--node-ip=127.0.0.1",
        "--cidr=127.0.250.0/24",  # only for nodes without a podCIDR; ours all have one
        f"--server-address=127.0.0.1:{ports.kwok}",
    ]


#: How often a component that crashed in a known start-up race is started again.
STARTUP_RACE_ATTEMPTS = 3


def crashed_in_known_startup_race(name: str, output: str) -> bool:
    """Whether a component's start-up output shows a crash that a fresh start avoids.

    kwok v0.8.0 builds each Stage's CEL environment lazily from its node and pod workers at
    once, and easycel v0.6.0 keeps its type caches in plain global maps: now and then the Go
    runtime stops kwok with "concurrent map writes" within its first second. Nothing has been
    simulated yet by then, so starting it again loses nothing. Any other exit stays fatal.
    """
    return name == "kwok" and "fatal error: concurrent map writes" in output and "easycel" in output


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Component:
    """One process of the stack and the URL that says it is healthy."""

    name: str
    argv: list[str]
    health_url: str
    needs_token: bool = False
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def components(bin_dir: Path, ports: Ports, files: Files) -> list[Component]:
    """The control plane in start order."""
    https = "https://127.0.0.1"
    return [
        Component(
            name="etcd",
            argv=etcd(bin_dir, ports, files),
            health_url=f"http://127.0.0.1:{ports.etcd_client}/health",
            needs_token=False,
        ),
        Component(
            name="kube-apiserver",
            argv=apiserver(bin_dir, ports, files),
            health_url=f"{https}:{ports.apiserver}/readyz",
            needs_token=True,
        ),
        Component(
            name="kube-controller-manager",
            argv=controller_manager(bin_dir, ports, files),
            health_url=f"{https}:{ports.controller_manager}/healthz",
            needs_token=False,
        ),
        Component(
            name="kube-scheduler",
            argv=scheduler(bin_dir, ports, files),
            health_url=f"{https}:{ports.scheduler}/healthz",
            needs_token=False,
        ),
        Component(
            name="kwok",
            argv=kwok(bin_dir, ports, files),
            health_url=f"http://127.0.0.1:{ports.kwok}/healthz",
            needs_token=False,
        ),
    ]
