"""Grafana dashboards from ``monitoring/dashboards.yaml`` (pure: dicts in, dicts out).

Each dashboard becomes Grafana's JSON model (importable as is) and a ConfigMap labelled
``grafana_dashboard: "1"``, which the Grafana sidecar of kube-prometheus-stack and the Grafana
Helm chart load. Panels are laid out two per row; their queries are kept verbatim, so what the
integration test runs is exactly what Grafana will run.
"""

from __future__ import annotations

import json
from typing import Any

Doc = dict[str, Any]

SCHEMA_VERSION = 39  # Grafana 10/11 dashboards
WIDTH, HEIGHT = 12, 8  # half of Grafana's 24-column grid per panel
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _label_variable(name: str, metric: str) -> Doc:
    return {
        "name": name,
        "label": name.capitalize(),
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": f"label_values({metric}, {name})", "refId": name},
        "definition": f"label_values({metric}, {name})",
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "refresh": 2,  # on time range change: new pools and models appear
        "sort": 1,
    }


def variables(extra: list[Doc]) -> list[Doc]:
    """datasource, namespace and model for every dashboard, then its own textboxes."""
    out = [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
        },
        _label_variable("namespace", "up"),
        _label_variable("model", "tokenfleet_gateway_requests_total"),
    ]
    out += [
        {
            "name": v["name"],
            "label": v.get("label", v["name"]),
            "type": "textbox",
            "query": str(v["default"]),
            "current": {"text": str(v["default"]), "value": str(v["default"])},
        }
        for v in extra
    ]
    return out


def panel(spec: Doc, index: int) -> Doc:
    """One panel at its place in the grid; its targets lettered A, B, …"""
    kind = spec.get("type", "timeseries")
    return {
        "id": index + 1,
        "type": kind,
        "title": spec["title"],
        "datasource": DATASOURCE,
        "gridPos": {"x": (index % 2) * WIDTH, "y": (index // 2) * HEIGHT, "w": WIDTH, "h": HEIGHT},
        "fieldConfig": {"defaults": {"unit": spec.get("unit", "short")}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {
                "refId": chr(ord("A") + n),
                "datasource": DATASOURCE,
                "expr": target["expr"],
                "legendFormat": target.get("legend", ""),
                "range": True,
            }
            for n, target in enumerate(spec["targets"])
        ],
    }


def dashboard(spec: Doc) -> Doc:
    """Grafana's JSON model of one dashboard."""
    return {
        "uid": spec["uid"],
        "title": spec["title"],
        "description": spec.get("description", ""),
        "tags": ["tokenfleet"],
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": variables(spec.get("variables", []))},
        "panels": [panel(p, i) for i, p in enumerate(spec["panels"])],
    }


def to_json(doc: Doc) -> str:
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def configmap(doc: Doc, *, namespace: str, labels: dict[str, str]) -> Doc:
    """The ConfigMap a Grafana sidecar provisions ``doc`` from."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"dashboard-{doc['uid']}",
            "namespace": namespace,
            "labels": {**labels, "grafana_dashboard": "1"},
        },
        "data": {f"{doc['uid']}.json": to_json(doc)},
    }


def queries(doc: Doc) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of a rendered dashboard."""
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p["targets"]]
