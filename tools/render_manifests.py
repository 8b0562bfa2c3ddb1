"""Render manifests/ from charts/tokenfleet (`make manifests`), or check it is current.

    python tools/render_manifests.py --write [--helm PATH]
    python tools/render_manifests.py --check [--helm PATH]   # exit 1 and list stale files

The chart is the one source: kustomize and GitOps users get the same objects through
`kubectl apply -k manifests/install`. Rendering uses the chart's defaults, except what a
template cannot do without a cluster: the namespace is created as an object, the random
Secrets are left to the user (a `helm template` render cannot keep a generated value, so every
render would rotate it), and `monitoring.enabled: auto` cannot ask the cluster whether it runs
the Prometheus Operator. It is rendered as if it did (`--api-versions monitoring.coreos.com/v1`),
and what that adds goes to manifests/monitoring/, apart: manifests/install is what `auto` gives
on a cluster without the Prometheus Operator (it applies anywhere), manifests/monitoring what it
adds where the Prometheus Operator runs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "tokenfleet"
OUT = REPO / "manifests"
RELEASE, NAMESPACE = "tokenfleet", "tokenfleet-system"
HEADER = "# Rendered from charts/tokenfleet by `make manifests`: edit the chart, not this file.\n"

#: Chart source (as helm names it) → file under manifests/.
FILES = {
    "templates/namespace.yaml": "base/namespace/namespace.yaml",
    "templates/operator-rbac.yaml": "operator/rbac.yaml",
    "templates/operator-deployment.yaml": "operator/deployment.yaml",
    "templates/gateway-rbac.yaml": "gateway/rbac.yaml",
    "templates/gateway-deployment.yaml": "gateway/deployment.yaml",
    "templates/redis.yaml": "gateway/redis.yaml",
    "templates/monitoring/podmonitors.yaml": "monitoring/podmonitors.yaml",
    "templates/monitoring/prometheusrule.yaml": "monitoring/prometheusrule.yaml",
    "templates/monitoring/dashboards-configmaps.yaml": "monitoring/dashboards-configmaps.yaml",
}
#: What `helm install` would find on a cluster running the Prometheus Operator (see above).
PROMETHEUS_OPERATOR_API = "monitoring.coreos.com/v1"

SECRETS_NOTE = """\
# Create the three random Secrets first (every gateway replica must share the salt; the
# engine key is the installation's: the gateway holds it, and the operator writes each pool the
# key derived from it for the pool's namespace, which its engines require):
#   kubectl create namespace tokenfleet-system
#   kubectl -n tokenfleet-system create secret generic tokenfleet-gateway-salt \\
#     --from-literal=salt="$(head -c 32 /dev/urandom | base64)"
#   kubectl -n tokenfleet-system create secret generic tokenfleet-redis \\
#     --from-literal=password="$(head -c 24 /dev/urandom | base64 | tr -dc A-Za-z0-9)"
#   kubectl -n tokenfleet-system create secret generic tokenfleet-engine-key \\
#     --from-literal=key="$(head -c 32 /dev/urandom | base64 | tr -dc A-Za-z0-9)"
"""

#: Static kustomizations (folder → text). Paths existing tooling applies stay where they were:
#: `-k manifests/operator` (with its namespace), `-f manifests/gateway/rbac.yaml`.
KUSTOMIZATIONS = {
    "crds": "# The CRDs (the chart's crds/, identical to the repository's crds/).\n",
    "base/namespace": "# The namespace every TokenFleet object lives in.\n",
    "operator": "# The operator: namespace, least-privilege RBAC, Deployment (leader-elected).\n",
    "gateway": "# The gateway, its RBAC and Redis (apply the namespace first, or use ../install).\n"
    + SECRETS_NOTE,
    "install": "# Everything: CRDs, namespace, operator, gateway, Redis.\n"
    "#   kubectl apply --server-side -k manifests/install\n" + SECRETS_NOTE,
    "monitoring": "# What the chart's monitoring.enabled=auto adds where the Prometheus Operator\n"
    "# runs (monitoring.coreos.com/v1): the PodMonitors that give worker series the namespace,\n"
    "# pool, model and revision labels autoscaling and canary analysis query by, the\n"
    "# PrometheusRule and the dashboards. Apply it after ../install, only there:\n"
    "#   kubectl apply --server-side -k manifests/monitoring\n"
    "# (add your Prometheus's selector label, e.g. release: <kube-prometheus-stack's name>, in an\n"
    "# overlay). Without the Prometheus Operator, add monitoring/rendered/scrape-configs.yaml to\n"
    "# your Prometheus instead (docs/install.md).\n",
}
RESOURCES = {
    "base/namespace": ["namespace.yaml"],
    "operator": ["../base/namespace", "rbac.yaml", "deployment.yaml"],
    "gateway": ["rbac.yaml", "redis.yaml", "deployment.yaml"],
    "install": ["../crds", "../operator", "../gateway"],
    "monitoring": ["podmonitors.yaml", "prometheusrule.yaml", "dashboards-configmaps.yaml"],
}


def helm_path() -> Path:
    cache = Path(os.environ.get("TOKENFLEET_CACHE") or Path.home() / ".cache/tokenfleet")
    return cache / "bin" / "current" / "helm"


def render(helm: Path) -> dict[str, str]:
    """manifests/-relative path → content, from `helm template` with the default values (and
    the Prometheus Operator's API, whose objects go to monitoring/ only)."""
    out = subprocess.run(
        [
            str(helm),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--include-crds",
            "--set",
            "namespace.create=true",
            "--set",
            "generateSecrets=false",
            "--api-versions",
            PROMETHEUS_OPERATOR_API,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    docs: dict[str, list[str]] = {}
    for chunk in re.split(r"^---\n", out, flags=re.MULTILINE):
        match = re.match(r"# Source: tokenfleet/(\S+)\n", chunk)
        if match is None or not chunk[match.end() :].strip():
            continue
        source = match.group(1)
        target = FILES.get(source) or (
            f"crds/{Path(source).name}" if source.startswith("crds/") else None
        )
        if target is None:
            raise SystemExit(f"render_manifests: no manifests/ file for chart source {source}")
        docs.setdefault(target, []).append(chunk[match.end() :].strip() + "\n")
    files = {path: HEADER + "---\n".join(parts) for path, parts in docs.items()}
    crds = sorted(p for p in files if p.startswith("crds/"))
    RESOURCES["crds"] = [Path(p).name for p in crds]
    for folder, comment in KUSTOMIZATIONS.items():
        lines = "".join(f"  - {r}\n" for r in RESOURCES[folder])
        files[f"{folder}/kustomization.yaml"] = (
            HEADER + comment + "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\nresources:\n" + lines
        )
    return files


def stale(files: dict[str, str]) -> list[str]:
    """Files that differ from what is on disk, plus rendered-folder files nobody renders."""
    wrong = [
        p for p, text in files.items() if not (OUT / p).is_file() or (OUT / p).read_text() != text
    ]
    folders = {Path(p).parent for p in files}
    extra = [
        str(f.relative_to(OUT))
        for folder in folders
        for f in (OUT / folder).glob("*.yaml")
        if str(f.relative_to(OUT)) not in files
    ]
    return sorted(wrong + extra)


def main(argv: list[str]) -> int:
    """``--write`` re-renders manifests/; ``--check`` fails listing the stale files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    parser.add_argument("--helm", type=Path, default=helm_path())
    args = parser.parse_args(argv)
    files = render(args.helm)
    wrong = stale(files)
    if args.check:
        if wrong:
            print(
                "manifests/ is stale (run `make manifests`):", *wrong, sep="\n  ", file=sys.stderr
            )
            return 1
        return 0
    for path in wrong:
        target = OUT / path
        if path in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files[path])
        else:
            target.unlink()
    print(f"manifests/: {len(wrong)} file(s) written or removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
