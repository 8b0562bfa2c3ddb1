"""Prometheus in the local stack: the shipped scrape jobs, against the local API server.

Prometheus discovers pods through ``kubernetes_sd_configs`` exactly as in a cluster, with the
jobs and relabel rules of ``monitoring/scrape.yaml`` (the source the PodMonitors and the plain
``scrape_configs`` are rendered from), so every series carries namespace, pool, model, revision
and zone because the pods' labels say so, not because the local stack wrote them down.

What the local stack needs that a cluster would not — all of it here:

- **Out-of-cluster discovery.** Prometheus runs as a host process, so it reaches the API server
  through the stack's kubeconfig (admin token; the API server's self-signed serving certificate
  as its CA) instead of an in-cluster service account.
- **Loopback pod IPs.** Worker pods get 127.N.x.y addresses from their node's podCIDR and the
  node agent forwards ``podIP:<containerPort>`` (8000, port ``http``) to its simulator, so the
  discovered address is scraped as is; nothing is rewritten.
- **Host processes as pods.** The gateway and operator run as processes on 127.0.0.1, not in
  containers. :func:`host_pod` describes one as the ``hostNetwork`` Pod its Deployment would
  create (same labels, same named port, the process's real port), pinned to a simulated node
  whose IP is 127.0.0.1, so pod discovery finds it like any replica. Such pods are marked with
  :data:`LOCAL_PROCESS`; no kubelet runs them.
- **Prometheus itself** comes from tools/build.sh (Go modules, Kubernetes discovery only):
  Debian's ``prometheus`` package has ``kubernetes_sd_configs`` patched out.
- **The real node's host-network pods on loopback.** A ``hostNetwork`` pod's IP is its node's
  InternalIP, and the kubelet of the real node takes the machine's own interface address for
  it (it refuses a loopback node IP). Nothing of ours may dial that address, so for pods on the
  real node that are not on its bridge (:func:`loopback_relabelings`) the target becomes
  ``127.0.0.1:<port>``: the same socket, reached on loopback. Bridge pods (the real workers)
  keep their bridge address; a real cluster's PodMonitors stay as they are.
- **A 1 s scrape and evaluation interval**, so tests see a change within seconds (the shipped
  jobs inherit the installation's interval, usually 15–30 s).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tokenfleet.devstack import monitoring

MONITORING = Path(__file__).resolve().parents[3] / "monitoring"
#: On a Pod: it stands for a host process of the local stack (the value says which), so that
#: Prometheus' pod discovery finds it. Local stack only.
LOCAL_PROCESS = "sim.tokenfleet.io/local-process"


def scrape_source() -> dict[str, Any]:
    return monitoring.load(MONITORING / "scrape.yaml")


def rules() -> str:
    """The shipped recording rules and alerts (monitoring/rules.yaml) as a rule file."""
    groups = monitoring.rule_groups(monitoring.load(MONITORING / "rules.yaml"))
    return yaml.safe_dump({"groups": groups}, sort_keys=False)


#: Set on a target while relabelling when it must be scraped on loopback (``__tmp_`` labels are
#: dropped once relabelling ends).
_ON_LOOPBACK = "__tmp_tokenfleet_host_network"


def loopback_relabelings(*, node: str, bridge_prefix: str) -> list[dict[str, Any]]:
    """Relabel rules that send a scrape of a host-network pod on ``node`` to 127.0.0.1 and the
    pod's port: a pod there whose IP does not start with ``bridge_prefix`` (e.g. ``10.250.0.``)
    shares the host's network, so its IP is the machine's own interface address.

    Prometheus' RE2 has no negative look-ahead, hence three steps: mark the node's pods, unmark
    those on the bridge, rewrite the address of what stays marked."""
    bridge = re.escape(bridge_prefix) + r"\d+"
    return [
        {
            "source_labels": ["__meta_kubernetes_pod_node_name"],
            "regex": re.escape(node),
            "target_label": _ON_LOOPBACK,
            "replacement": "1",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_ip"],
            "regex": bridge,
            "target_label": _ON_LOOPBACK,
            "replacement": "",
        },
        {
            "source_labels": [_ON_LOOPBACK, "__meta_kubernetes_pod_container_port_number"],
            "regex": r"1;(\d+)",
            "target_label": "__address__",
            "replacement": "127.0.0.1:$1",
        },
    ]


def config(
    *,
    kubeconfig: Path,
    rule_files: list[Path] | None = None,
    loopback: list[dict[str, Any]] | None = None,
) -> str:
    """prometheus.yml: the shipped jobs, discovering through the local API server, and the
    shipped rules (evaluated every second here). ``loopback`` (:func:`loopback_relabelings`)
    goes first in every job, before the shipped rules read the address."""
    jobs = monitoring.scrape_configs(scrape_source(), sd={"kubeconfig_file": str(kubeconfig)})
    for job in jobs:
        job["relabel_configs"] = [*(loopback or []), *job["relabel_configs"]]
    doc = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files or []],
        "scrape_configs": jobs,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def argv(*, bin_dir: Path, config_file: Path, data_dir: Path, port: int) -> list[str]:
    """Prometheus as tools/build.sh builds it: Debian's package cannot discover pods (its
    Kubernetes service discovery is patched out)."""
    return [
        str(bin_dir / "prometheus"),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=6h",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]


def host_pod(
    *, job: str, name: str, port: int, node: str, namespace: str = monitoring.INSTALL_NAMESPACE
) -> dict[str, Any]:
    """The Pod that makes a host process (listening on 127.0.0.1:``port``) a target of the
    shipped scrape ``job``: that job's pod labels and named port, on the host network."""
    spec = next(j for j in scrape_source()["jobs"] if j["job"] == job)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(spec["pod_labels"]),
            "annotations": {LOCAL_PROCESS: f"{job} on 127.0.0.1:{port}"},
        },
        "spec": {
            "nodeName": node,  # not scheduled: it runs where the process runs, the host
            "hostNetwork": True,  # so its IP is the node's, 127.0.0.1
            "tolerations": [{"operator": "Exists"}],  # a test's node outage must not evict it
            "containers": [
                {
                    "name": job,
                    "image": "local-process",  # never pulled: kwok runs no containers
                    "ports": [{"name": spec["port"], "containerPort": port}],
                }
            ],
        },
    }
