"""Render ``monitoring/`` (the one source of scrape jobs, rules and dashboards) into what each
kind of Prometheus installation consumes, and check that the committed renderings are current.

Why here, in the devstack root: the sources are repository data, not code any runtime imports
(the operator and gateway only *export* metrics), and the one program that runs them is the
local platform's Prometheus. The rendering functions are pure (dicts in, dicts out); only
:func:`main` touches files.

    python -m tokenfleet.devstack.monitoring --write monitoring    (make monitoring)
    python -m tokenfleet.devstack.monitoring --check monitoring    (a unit test runs it)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tokenfleet.devstack import dashboards

Doc = dict[str, Any]

HEADER = "# Generated from monitoring/{source} by `make monitoring`. Do not edit.\n"
#: Where the shipped objects live: the operator's namespace (Prometheus selects them there).
INSTALL_NAMESPACE = "tokenfleet-system"
PART_OF = {"app.kubernetes.io/part-of": "tokenfleet"}
#: Pods Prometheus cannot scrape (not started, or finished) are not targets; a real cluster's
#: Prometheus Operator filters the same phases.
NOT_RUNNING = "Pending|Succeeded|Failed|Unknown"


def label_meta(key: str) -> str:
    """The pod-discovery meta label of a pod label key (``tokenfleet.io/pool`` →
    ``__meta_kubernetes_pod_label_tokenfleet_io_pool``): Prometheus sanitizes ``.``/``/``."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in key)


def _relabelings(source: Doc, job: Doc) -> list[Doc]:
    return [*source.get("common_relabelings", []), *job.get("relabelings", [])]


def scrape_configs(source: Doc, *, sd: Doc | None = None) -> list[Doc]:
    """Plain Prometheus ``scrape_configs``: pod discovery (``sd`` adds e.g. a kubeconfig),
    the job's pods and port selected by relabelling, then the shared rules."""
    out = []
    for job in source["jobs"]:
        select: list[Doc] = [
            {"action": "keep", "source_labels": [label_meta(k)], "regex": v}
            for k, v in sorted(job["pod_labels"].items())
        ]
        select += [
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": job["port"],
            },
            {
                "action": "drop",
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": NOT_RUNNING,
            },
        ]
        out.append(
            {
                "job_name": job["job"],
                "honor_labels": bool(job["honor_labels"]),
                "metrics_path": job["path"],
                "kubernetes_sd_configs": [{"role": "pod", **(sd or {})}],
                "relabel_configs": select + _relabelings(source, job),
            }
        )
    return out


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.capitalize() for part in rest)


def pod_monitors(source: Doc, *, namespace: str = INSTALL_NAMESPACE) -> list[Doc]:
    """Prometheus Operator PodMonitors for the same jobs. The operator selects pods and the
    port itself and names the job ``<namespace>/<name>``: the last relabeling sets the job
    name the queries use, as the plain configuration's ``job_name`` does."""
    out = []
    for job in source["jobs"]:
        rules = [*_relabelings(source, job), {"target_label": "job", "replacement": job["job"]}]
        out.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PodMonitor",
                "metadata": {"name": job["podmonitor"], "namespace": namespace, "labels": PART_OF},
                "spec": {
                    "namespaceSelector": {"any": True},
                    "selector": {"matchLabels": dict(job["pod_labels"])},
                    "podMetricsEndpoints": [
                        {
                            "port": job["port"],
                            "path": job["path"],
                            "honorLabels": bool(job["honor_labels"]),
                            "relabelings": [{_camel(k): v for k, v in r.items()} for r in rules],
                        }
                    ],
                },
            }
        )
    return out


_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def _fill(value: Any, values: dict[str, str]) -> Any:
    """``${name}`` replaced in every string of ``value`` (PromQL's own ``$1`` stays)."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), value)
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    return value


def rule_groups(source: Doc) -> list[Doc]:
    """Prometheus rule groups: parameters filled in, each ``each:`` rule written per entry."""
    params = {k: str(v) for k, v in source.get("params", {}).items()}
    groups = []
    for group in source["groups"]:
        rules = []
        for rule in group["rules"]:
            body = {k: v for k, v in rule.items() if k != "each"}
            for extra in rule.get("each") or [{}]:
                rules.append(_fill(body, params | {k: str(v) for k, v in extra.items()}))
        groups.append({**{k: v for k, v in group.items() if k != "rules"}, "rules": rules})
    return groups


def prometheus_rule(source: Doc, *, namespace: str = INSTALL_NAMESPACE) -> Doc:
    """The same groups as a Prometheus Operator PrometheusRule."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "tokenfleet", "namespace": namespace, "labels": PART_OF},
        "spec": {"groups": rule_groups(source)},
    }


class _Dumper(yaml.SafeDumper):
    """No ``&id001`` anchors: shared rules are written out in full, as a reader expects."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(docs: list[Doc], source: str) -> str:
    """YAML documents with the generated-file header."""
    text = yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=100)
    return HEADER.format(source=source) + text


#: Where the chart finds the rendered Prometheus Operator objects, relative to monitoring/.
CHART_FILES = "../charts/tokenfleet/files/monitoring"


def render_files(folder: Path) -> dict[str, str]:
    """Relative path under ``folder`` → the text that must be there."""
    scrape = load(folder / "scrape.yaml")
    rules = load(folder / "rules.yaml")
    boards = [dashboards.dashboard(d) for d in load(folder / "dashboards.yaml")["dashboards"]]
    maps = [dashboards.configmap(b, namespace=INSTALL_NAMESPACE, labels=PART_OF) for b in boards]
    operator_objects = {
        "dashboards-configmaps.yaml": dump(maps, "dashboards.yaml"),
        "prometheusrule.yaml": dump([prometheus_rule(rules)], "rules.yaml"),
        "podmonitors.yaml": dump(pod_monitors(scrape), "scrape.yaml"),
    }
    return {
        **{f"rendered/dashboards/{b['uid']}.json": dashboards.to_json(b) for b in boards},
        **{f"rendered/{name}": text for name, text in operator_objects.items()},
        "rendered/rules.yaml": dump([{"groups": rule_groups(rules)}], "rules.yaml"),
        "rendered/scrape-configs.yaml": dump(
            [{"scrape_configs": scrape_configs(scrape)}], "scrape.yaml"
        ),
        # The chart installs the same objects (monitoring.enabled); Helm reads only files inside
        # the chart, so they are copied there, checked current with the rest.
        **{f"{CHART_FILES}/{name}": text for name, text in operator_objects.items()},
    }


def load(path: Path) -> Doc:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping at the top")
    return doc


def main(argv: list[str]) -> int:
    """``--write DIR`` rewrites ``DIR/rendered``; ``--check DIR`` fails if it is stale."""
    if len(argv) != 2 or argv[0] not in ("--write", "--check"):
        print(
            "usage: python -m tokenfleet.devstack.monitoring --write|--check DIR", file=sys.stderr
        )
        return 2
    folder = Path(argv[1])
    files = render_files(folder)
    if argv[0] == "--check":
        stale = [
            n
            for n, t in files.items()
            if not (folder / n).is_file() or (folder / n).read_text() != t
        ]
        for name in stale:
            print(f"{folder / name} is stale: run make monitoring", file=sys.stderr)
        return 1 if stale else 0
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
