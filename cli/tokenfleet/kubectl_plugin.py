"""``kubectl tokenfleet``: rollout status, history and controls, pools and live load.

Installed as the ``kubectl-tokenfleet`` executable, so ``kubectl tokenfleet …`` finds it on
PATH. It reads the same kubeconfig kubectl does ($KUBECONFIG, else ~/.kube/config;
``--kubeconfig`` and ``--context`` override) and the namespace from ``-n`` or the context.

The controls write the declarative fields of ``spec.rollout`` — ``paused``, ``promote``,
``abort`` — exactly as a Git change would (a JSON merge patch with field manager
``kubectl-tokenfleet``, nothing else). They are levels, not one-shot events: ``promote`` or
``abort`` left set applies to the next revision as well, so ``rollout clear`` sets all three
back to false. With GitOps, Git wins: a sync (or self-heal) puts back whatever the manifest in
Git says for a field it sets; a field Git does not set keeps kubectl's value. For a
GitOps-managed deployment, commit the same field instead (the command prints it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, cast

import kubernetes
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

from tokenfleet import cli
from tokenfleet import rollout_views as views
from tokenfleet.api.base import API_GROUP, API_VERSION
from tokenfleet.signals import queries

FIELD_MANAGER = "kubectl-tokenfleet"
#: Seconds a Prometheus query may take; `top` is interactive.
PROMETHEUS_TIMEOUT = 5


def _kubectl_flags(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """kubectl's own flags on ``parser``: with their defaults on the top-level parser, and
    without (``SUPPRESS``) on each subcommand's, so that a value given after the subcommand
    overrides one given before it and an absent one leaves it alone."""

    def default(value: str | None) -> str | None:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("-n", "--namespace", default=default(""))
    parser.add_argument("--kubeconfig", default=default(None))
    parser.add_argument("--context", default=default(None))
    parser.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default=default("table")
    )


def _parser() -> argparse.ArgumentParser:
    """The command line; kubectl users put -n, --kubeconfig, --context and -o anywhere."""
    p = argparse.ArgumentParser(prog="kubectl tokenfleet", description=__doc__.split("\n")[0])
    _kubectl_flags(p, defaults=True)
    sub = p.add_subparsers(dest="command", required=True)
    rollout = sub.add_parser("rollout", help="a ModelDeployment's canary rollout")
    rollout.add_argument(
        "action", choices=("status", "history", *views.CONTROLS), help="what to show or set"
    )
    rollout.add_argument("name", help="ModelDeployment name")
    pools = sub.add_parser("pools", help="desired/ready/warm replicas per pool and zone")
    top = sub.add_parser("top", help="live TTFT p99, queue age and KV usage per pool")
    top.add_argument("--prometheus", required=True, help="Prometheus URL, e.g. http://host:9090")
    for command in (rollout, pools, top):
        _kubectl_flags(command, defaults=False)
    return p


def _client(args: argparse.Namespace) -> tuple[kubernetes.client.CustomObjectsApi, str]:
    kubernetes.config.load_kube_config(config_file=args.kubeconfig, context=args.context)
    if not kubernetes.client.Configuration.get_default_copy().verify_ssl:
        # the kubeconfig asked for it (insecure-skip-tls-verify); kubectl does not warn either
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    namespace = args.namespace
    if not namespace:
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=args.kubeconfig)
        chosen: dict[str, Any] = next((c for c in contexts if c["name"] == args.context), active)
        namespace = str((chosen.get("context") or {}).get("namespace") or "default")
    return kubernetes.client.CustomObjectsApi(), namespace


def _get(api: kubernetes.client.CustomObjectsApi, ns: str, plural: str, name: str) -> Any:
    return api.get_namespaced_custom_object(API_GROUP, API_VERSION, ns, plural, name)


def _list(api: kubernetes.client.CustomObjectsApi, ns: str, plural: str) -> list[Any]:
    found = cast(
        "dict[str, Any]", api.list_namespaced_custom_object(API_GROUP, API_VERSION, ns, plural)
    )
    return sorted(found.get("items", []), key=lambda o: o["metadata"]["name"])


def _control(api: kubernetes.client.CustomObjectsApi, ns: str, action: str, name: str) -> int:
    patch = views.control_patch(action)
    api.patch_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, "modeldeployments", name, patch, field_manager=FIELD_MANAGER
    )
    fields = ", ".join(
        f"spec.rollout.{k}={str(v).lower()}" for k, v in views.CONTROLS[action].items()
    )
    print(f"modeldeployment {ns}/{name}: set {fields}")
    print("(with GitOps, commit the same field: Git's value wins at the next sync)")
    return 0


def _prometheus_value(url: str, query: str) -> float | None:
    """One instant value from Prometheus; None when absent, NaN or unreachable."""
    if not url.startswith(("http://", "https://")):
        raise SystemExit(f"kubectl tokenfleet: --prometheus must be an http(s) URL, not {url!r}")
    target = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        with urllib.request.urlopen(target, timeout=PROMETHEUS_TIMEOUT) as response:  # noqa: S310
            result = json.load(response)["data"]["result"]
    except (urllib.error.URLError, OSError, KeyError, ValueError):
        return None
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value  # NaN: a quantile over no requests


def _loads(url: str, ns: str, names: Sequence[str]) -> list[views.PoolLoad]:
    return [
        views.PoolLoad(
            pool=name,
            ttft_p99=_prometheus_value(url, queries.pool_ttft_p99(ns, name)),
            queue_age=_prometheus_value(url, queries.oldest_queue_age(ns, name)),
            kv_usage=_prometheus_value(url, queries.kv_cache_usage(ns, name)),
        )
        for name in names
    ]


def _show(view: views.View, output: str) -> None:
    if output == "json":
        print(json.dumps(view.data, indent=2, sort_keys=True))
    elif output == "yaml":
        print(yaml.safe_dump(dict(view.data), sort_keys=True), end="")
    else:
        print(views.render(view))


def run(args: argparse.Namespace) -> int:
    """Fetch, render, print (or, for a control, patch)."""
    api, ns = _client(args)
    if args.command == "rollout" and args.action in views.CONTROLS:
        return _control(api, ns, args.action, args.name)
    if args.command == "rollout":
        body = _get(api, ns, "modeldeployments", args.name)
        shown = views.rollout_status if args.action == "status" else views.rollout_history
        _show(shown(args.name, body), args.output)
    elif args.command == "pools":
        _show(views.pools(_list(api, ns, "inferencepools")), args.output)
    else:
        names = [b["metadata"]["name"] for b in _list(api, ns, "inferencepools")]
        _show(views.top(_loads(args.prometheus, ns, names)), args.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kubectl-tokenfleet``; API errors are one line on stderr, exit 1; a
    closed stdout (``… | head``) ends it quietly, exit 141."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    return cli.closed_stdout_is_quiet(lambda: _run_reporting_errors(args))


def _run_reporting_errors(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except ApiException as exc:
        detail = str(exc.reason)
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            detail = str(json.loads(exc.body or "").get("message", detail))
        print(f"kubectl tokenfleet: {exc.status}: {detail}", file=sys.stderr)
        return 1
    except kubernetes.config.ConfigException as exc:
        print(f"kubectl tokenfleet: kubeconfig: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
