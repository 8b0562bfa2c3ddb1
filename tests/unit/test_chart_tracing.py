"""The chart's gateway.tracing values, rendered by helm without a cluster.

Matrix: off by default (no tracing variable at all), on with every knob (the variables the
gateway reads, tests/unit/gateway/test_trace_context.py, and that its settings accept), and the
values the schema refuses (an endpoint that is no http(s) URL, a ratio outside [0, 1], a
misspelt key). helm is the one tools/build.sh builds: the test fails, never skips, if missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_chart_monitoring import CHART, helm, rendered

from tokenfleet.gateway.policy import trace_context

TRACING = {
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "TOKENFLEET_TRACE_SAMPLE_RATIO",
    "TOKENFLEET_TRACE_KEEP_ERRORS",
    "TOKENFLEET_TRACE_KEEP_SLO_MISSES",
}


def gateway_env(tmp_path: Path, *args: str) -> dict[str, str]:
    (deployment,) = [
        d
        for d in rendered(tmp_path, *args)
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-gateway")
    ]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", "") for e in env}


def test_tracing_is_off_by_default(tmp_path: Path) -> None:
    assert not TRACING & set(gateway_env(tmp_path))


def test_tracing_on_sets_what_the_gateway_reads(tmp_path: Path) -> None:
    env = gateway_env(
        tmp_path,
        "--set",
        "gateway.tracing.endpoint=http://otel-collector.monitoring:4318/v1/traces",
        "--set-json",
        "gateway.tracing.sampleRatio=0.05",
        "--set",
        "gateway.tracing.keepSloMisses=false",
    )
    assert {k: v for k, v in env.items() if k in TRACING} == {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://otel-collector.monitoring:4318/v1/traces",
        "TOKENFLEET_TRACE_SAMPLE_RATIO": "0.05",
        "TOKENFLEET_TRACE_KEEP_ERRORS": "1",
        "TOKENFLEET_TRACE_KEEP_SLO_MISSES": "0",
    }
    assert trace_context.Settings.from_env(env) == trace_context.Settings(
        endpoint="http://otel-collector.monitoring:4318/v1/traces",
        ratio=0.05,
        keep_slo_misses=False,
    )


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('gateway.tracing.endpoint="otel-collector:4318"', "/gateway/tracing/endpoint"),
        ("gateway.tracing.sampleRatio=1.5", "maximum"),
        ("gateway.tracing.sampleRatio=-0.1", "minimum"),
        ("gateway.tracing.sampelRatio=0.5", "sampelRatio"),
    ],
)
def test_the_schema_refuses_what_the_gateway_could_not_use(
    tmp_path: Path, value: str, says: str
) -> None:
    done = helm("template", "tokenfleet", str(CHART), "--set-json", value, home=tmp_path)
    assert done.returncode != 0 and says in done.stderr, done.stderr
