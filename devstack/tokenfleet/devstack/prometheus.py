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
- **A 1 s scrape and evaluation interval**, so tests see a change within seconds (the shipped
  jobs inherit the installation's interval, usually 15–30 s).
"""

from __future__ import annotations

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


def config(*, kubeconfig: Path, rule_files: list[Path] | None = None) -> str:
    """prometheus.yml: the shipped jobs, discovering through the local API server, and the
    shipped rules (evaluated every second here)."""
    jobs = monitoring.scrape_configs(scrape_source(), sd={"kubeconfig_file": str(kubeconfig)})
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
