"""The local platform's trace backend, as rendered (tokenfleet.devstack.jaeger, chart, platform).

Matrix: Jaeger's configuration (every listener on loopback at the stack's ports, OTLP/HTTP the
only receiver, memory storage the query reads); the chart install `make up` runs sends the
gateway's spans there, every request's (helm renders the variables the gateway reads); the
host-process gateway gets the same; the usage text names Jaeger's address. Nothing is started:
tests/integration/test_gateway_traces.py runs this configuration for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_chart_monitoring import rendered

from tokenfleet.devstack import __main__ as devstack_main
from tokenfleet.devstack import chart, controlplane, jaeger, platform
from tokenfleet.gateway.policy import trace_context

CHART = Path(__file__).resolve().parents[2] / "charts" / "tokenfleet"
PORTS = controlplane.DEFAULT_PORTS.shifted(7)
TRACES = f"http://127.0.0.1:{PORTS.jaeger_otlp}/v1/traces"


def test_every_listener_is_on_loopback_at_the_stacks_ports() -> None:
    config = jaeger.config(jaeger.Ports.of(PORTS))
    text = json.dumps(config)
    endpoints = sorted(
        int(e.rsplit(":", 1)[1]) for e in _endpoints(config) if e.startswith("127.0.0.1:")
    )
    assert endpoints == sorted(
        [PORTS.jaeger_otlp, PORTS.jaeger_query, PORTS.jaeger_grpc, PORTS.jaeger_health]
    )
    assert len(_endpoints(config)) == 4 and "0.0.0.0" not in text
    assert list(config["receivers"]["otlp"]["protocols"]) == ["http"]
    store = config["extensions"]["jaeger_query"]["storage"]["traces"]
    assert store in config["extensions"]["jaeger_storage"]["backends"]
    assert config["exporters"]["jaeger_storage_exporter"]["trace_storage"] == store


def _endpoints(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == "endpoint" and isinstance(v, str)]
        return found + [e for v in node.values() for e in _endpoints(v)]
    return []


def test_the_charts_gateway_sends_every_trace_to_the_stacks_jaeger(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "tokenfleet.tag").write_text("localhost/tokenfleet:abc\n")
    (images / "redis.tag").write_text("localhost/redis:def\n")
    argv = chart.helm_argv(
        helm=Path("helm"),
        chart=CHART,
        images=images,
        ports=PORTS,
        health_port=1,
        metrics_port=2,
    )
    sets = argv[argv.index("-f") + 2 :]  # --set/--set-string key=value pairs after the overlay
    flags = [sets[i + 1] for i in range(0, len(sets), 2)]
    (tracing,) = [f for f in flags if f.startswith("gateway.tracing.endpoint=")]
    assert tracing == f"gateway.tracing.endpoint={TRACES}"
    assert "gateway.tracing.sampleRatio=1" in flags
    env = _gateway_env(rendered(tmp_path, "-f", str(CHART / "values-local.yaml"), *sets))
    got = trace_context.Settings.from_env(env)
    assert (got.endpoint, got.ratio) == (TRACES, 1.0)


def _gateway_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    (deployment,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-gateway")
    ]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_host_process_gateway_sends_every_trace_there_too(tmp_path: Path) -> None:
    component = platform.gateway_component(
        state_dir=tmp_path, kubeconfig=tmp_path / "kc", port=1, redis_port=2, traces_url=TRACES
    )
    got = trace_context.Settings.from_env(component.env)
    assert (got.endpoint, got.ratio) == (TRACES, 1.0)
    plain = platform.gateway_component(
        state_dir=tmp_path, kubeconfig=tmp_path / "kc", port=1, redis_port=2
    )
    assert not trace_context.Settings.from_env(plain.env).on


def test_the_usage_text_names_jaeger() -> None:
    url = jaeger.Ports.of(PORTS).query_url
    assert url in devstack_main._jaeger({"jaeger": url})
    assert devstack_main._jaeger({}) == ""
