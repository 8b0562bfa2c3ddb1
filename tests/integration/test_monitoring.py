"""The shipped monitoring on the local platform, under a short real load: the stack's Prometheus
finds workers, the gateway and the operator through pod discovery with the shipped jobs, loads
the shipped rules, and every dashboard panel's PromQL returns data.

The load: a pool of three simulated workers (one in ten requests fails before its first byte,
so the gateway retries), a real gateway in Kubernetes mode with Redis quotas, the session's
operator exporting its metrics, and the openai SDK streaming and non-streaming completions with
a shared long prefix from two tenants, one of them held to 1 request per minute (429s).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from support import artifact
from support.cluster import REPO, Cluster, namespace, scraped, wait_for
from support.gateway import Redis, free_port, running, start_gateway
from support.objects import manifest
from support.operator import service_account_kubeconfig
from tokenfleet.api import labels
from tokenfleet.devstack import dashboards, engine_panels, monitoring

BOARDS = [
    dashboards.dashboard(d)
    for d in monitoring.load(REPO / "monitoring" / "dashboards.yaml")["dashboards"]
]
PANELS = [(b["uid"], title, expr) for b in BOARDS for title, expr in dashboards.queries(b)]
LOAD_SECONDS = 25.0
#: Local scrapes are 1 s apart, so a 1 m rate window holds 60 points; the range a panel sums
#: over (``$__range``) is the dashboards' default hour.
GRAFANA = {"$__rate_interval": "1m", "$__range": "1h", "$price_per_million_tokens": "2"}
PREFIX = "You are a careful assistant. " * 12  # > 256 characters: several prefix blocks


@pytest.fixture(scope="module")
def loaded(
    cluster: Cluster, operator: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A namespace and model that served the load; yields the dashboard variables to use."""
    tmp = tmp_path_factory.mktemp("monitoring")
    with namespace(cluster, f"t-monitoring-{uuid.uuid4().hex[:5]}") as ns:
        model = f"watched-{ns[-5:]}"
        deploy(cluster, ns, model)
        wait_for(
            "3 ready workers",
            lambda: (
                cluster.get("tfpool", "watch", "-n", ns).get("status", {}).get("readyReplicas") == 3
            ),
            timeout=90,
        )
        keys = {t: create_key(cluster, ns, t) for t in ("steady", "limited")}
        redis = Redis(port=free_port(), log=tmp / "redis.log")
        redis.start()
        kubeconfig = service_account_kubeconfig(
            cluster, tmp / "gw-kubeconfig", component="gateway", account="tokenfleet-gateway"
        )
        try:
            with (
                running(
                    start_gateway(
                        tmp, None, "--redis", redis.url, env={"KUBECONFIG": str(kubeconfig)}
                    )
                ) as g,
                scraped(cluster, job="tokenfleet-gateway", port=g.port),
            ):
                drive(f"{g.url}/v1", model, keys)
                yield {"$namespace": ns, "$model": model, "gateway_port": str(g.port)}
        finally:
            redis.kill()


def deploy(cluster: Cluster, ns: str, model: str) -> None:
    cluster.apply(
        artifact.trust_secret(ns),
        manifest(
            "InferencePool",
            "watch",
            ns,
            {
                "zones": {"names": ["zone-a", "zone-b", "zone-c"]},
                "warm": {"perZone": 1},
                "replicas": {"min": 3, "max": 3},
            },
        ),
        {
            **manifest(
                "ModelDeployment",
                "watched",
                ns,
                {
                    "model": {"name": model},
                    "pools": ["watch"],
                    "artifact": artifact.spec(),
                },
            ),
            "metadata": {
                "name": "watched",
                "namespace": ns,
                "annotations": {
                    labels.SIM_ARGS: "--inter-token-latency 5ms --time-to-first-token 20ms "
                    "--failure-injection-rate 10 --failure-types server_error"
                },
            },
        },
        manifest(
            "Tenant",
            "steady",
            ns,
            {"apiKeySecretRef": {"name": "steady-keys"}, "allowedModels": [model]},
        ),
        manifest(
            "Tenant",
            "limited",
            ns,
            {
                "apiKeySecretRef": {"name": "limited-keys"},
                "allowedModels": [model],
                "quotas": {"requestsPerMinute": 1},
            },
        ),
    )


def create_key(cluster: Cluster, ns: str, tenant: str) -> str:
    return subprocess.run(
        [str(Path(sys.executable).parent / "tokenfleet"), "tenant", "create-key", tenant, "-n", ns],
        capture_output=True,
        text=True,
        env=cluster.env,
        check=True,
    ).stdout.strip()


def drive(base_url: str, model: str, keys: dict[str, str]) -> None:
    """LOAD_SECONDS of streaming and plain completions from 6 threads, plus a limited tenant."""
    steady = openai.OpenAI(base_url=base_url, api_key=keys["steady"], max_retries=0, timeout=30)
    limited = openai.OpenAI(base_url=base_url, api_key=keys["limited"], max_retries=0, timeout=30)

    def one(n: int) -> None:
        with contextlib.suppress(openai.APIError):
            if n % 2:
                stream = steady.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": f"{PREFIX} question {n}"}],
                    max_tokens=12,
                    stream=True,
                )
                for _ in stream:
                    pass
            else:
                steady.completions.create(model=model, prompt=f"{PREFIX} {n}", max_tokens=8)

    def refused() -> bool:
        try:
            limited.completions.create(model=model, prompt="hi", max_tokens=2)
        except openai.RateLimitError:
            return True
        return False

    wait_for("the gateway to route the model", lambda: steady.models.list().data, timeout=60)
    wait_for("a served request", lambda: one(0) is None and True, timeout=30)
    assert any(refused() for _ in range(4)), "the 1-per-minute tenant was never limited"
    deadline = time.monotonic() + LOAD_SECONDS
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        n = 0
        while time.monotonic() < deadline:
            list(pool.map(one, range(n, n + 12)))
            n += 12


def query(cluster: Cluster, promql: str) -> list[Any]:
    response = requests.get(
        f"{cluster.info['prometheus']}/api/v1/query", params={"query": promql}, timeout=10
    )
    body = response.json()
    assert body["status"] == "success", f"{promql}: {body}"
    return list(body["data"]["result"])


def with_variables(expr: str, variables: dict[str, str]) -> str:
    for name, value in sorted({**GRAFANA, **variables}.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    return expr


def test_gateway_and_operator_are_found_through_pod_discovery(
    cluster: Cluster, loaded: dict[str, str]
) -> None:
    pod = f"local-tokenfleet-gateway-{loaded['gateway_port']}"
    wait_for(
        "the gateway scraped as its pod",
        lambda: query(cluster, f'up{{job="tokenfleet-gateway",pod="{pod}"}} == 1'),
        timeout=30,
    )
    workers = query(cluster, f'up{{job="vllm",namespace="{loaded["$namespace"]}"}} == 1')
    assert {w["metric"]["zone"] for w in workers} == {"zone-a", "zone-b", "zone-c"}
    assert query(cluster, 'up{job="tokenfleet-operator"} == 1')


def test_shipped_rules_are_loaded_and_evaluate(cluster: Cluster, loaded: dict[str, str]) -> None:
    shipped = monitoring.rule_groups(monitoring.load(REPO / "monitoring" / "rules.yaml"))
    body = requests.get(f"{cluster.info['prometheus']}/api/v1/rules", timeout=10).json()
    groups = {g["name"]: g for g in body["data"]["groups"]}
    assert set(groups) == {g["name"] for g in shipped}
    broken = [
        (r["name"], r.get("lastError"))
        for g in groups.values()
        for r in g["rules"]
        if r["health"] != "ok"
    ]
    assert not broken, broken
    assert sum(len(g["rules"]) for g in groups.values()) == sum(len(g["rules"]) for g in shipped)


@pytest.mark.parametrize(
    ("title", "expr"),
    # what only real vLLM exports is checked on it (tests/e2e/test_real_engine_on_make_up.py)
    [
        pytest.param(t, e, id=f"{uid}:{t}")
        for uid, t, e in PANELS
        if e not in engine_panels.SIMULATOR_SILENT
    ],
)
def test_every_panel_returns_data(
    cluster: Cluster, loaded: dict[str, str], title: str, expr: str
) -> None:
    promql = with_variables(expr, {k: v for k, v in loaded.items() if k.startswith("$")})
    # Recorded series need one evaluation after their inputs appear (1 s here).
    wait_for(f"data for panel {title!r}: {promql}", lambda: query(cluster, promql), timeout=20)


@pytest.mark.parametrize(
    ("title", "expr"),
    [pytest.param(t, e, id=f"{uid}:{t}") for uid, t, e in PANELS if "$model" in e],
)
def test_panels_show_only_the_chosen_model(
    cluster: Cluster, loaded: dict[str, str], title: str, expr: str
) -> None:
    """The control: the variables really select, so the data above is the test's own."""
    promql = with_variables(expr, {"$namespace": loaded["$namespace"], "$model": "no-such-model"})
    assert query(cluster, promql) == [], f"panel {title!r} ignores $model: {promql}"
