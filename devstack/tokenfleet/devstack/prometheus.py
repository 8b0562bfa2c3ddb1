"""Prometheus in the local stack: scrapes every simulated vLLM and the gateway every second.

The node agent writes the simulators as file_sd targets (one per pod, labelled with pool,
model, revision and zone, as a Kubernetes pod-discovery relabelling would), so queries select
a pool's workers by label exactly as they would in a cluster.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

import yaml

from tokenfleet.api import labels

TARGETS_FILE = "targets-vllm.json"


def config(*, targets_dir: Path, gateway_port: int | None) -> str:
    scrape = [
        {
            "job_name": "vllm",
            "file_sd_configs": [
                {"files": [str(targets_dir / "targets-*.json")], "refresh_interval": "1s"}
            ],
        }
    ]
    if gateway_port is not None:
        scrape.append(
            {
                "job_name": "tokenfleet-gateway",
                "static_configs": [{"targets": [f"127.0.0.1:{gateway_port}"]}],
            }
        )
    doc = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "scrape_configs": scrape,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def argv(*, config_file: Path, data_dir: Path, port: int) -> list[str]:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    return [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=6h",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]


def targets(pods: Iterable[tuple[str, int, dict[str, str]]]) -> str:
    """file_sd JSON for (pod IP, port, pod labels) of running simulators."""
    groups = []
    for ip, port, pod_labels in sorted(pods, key=lambda p: (p[0], p[1])):
        keep = {
            labels.POOL: "pool",
            labels.MODEL: "model",
            labels.REVISION: "revision",
            labels.ZONE: "zone",
        }
        groups.append(
            {
                "targets": [f"{ip}:{port}"],
                "labels": {name: pod_labels[key] for key, name in keep.items() if key in pod_labels}
                | {
                    "namespace": pod_labels.get("__namespace", ""),
                    "pod": pod_labels.get("__pod", ""),
                },
            }
        )
    return json.dumps(groups, indent=1)


def write_targets(directory: Path, text: str) -> None:
    """Atomically, so Prometheus never reads half a file."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (TARGETS_FILE + ".tmp")
    tmp.write_text(text)
    tmp.replace(directory / TARGETS_FILE)
