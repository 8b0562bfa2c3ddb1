"""W3C trace context and the keep decision (gateway/policy/trace_context.py).

Matrix: traceparent headers valid and not (versions, lengths, case, all-zero ids, flags, a
future version's extra fields), the header written back; which ended requests are kept — errors
and SLO misses whatever the draw, the rest as drawn, each rule switchable; the settings from
the environment, and every value that cannot be used refused with its name.
"""

from __future__ import annotations

import pytest

from tokenfleet.gateway.policy import trace_context as tc

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        pytest.param(f"00-{TRACE}-{SPAN}-01", True, id="sampled"),
        pytest.param(f"00-{TRACE}-{SPAN}-00", True, id="not-sampled"),
        pytest.param(f"  00-{TRACE}-{SPAN}-01 ", True, id="spaces-around"),
        pytest.param(f"01-{TRACE}-{SPAN}-01-future", True, id="future-version-extra-field"),
        pytest.param(f"00-{TRACE}-{SPAN}-01-extra", False, id="version-00-extra-field"),
        pytest.param(f"ff-{TRACE}-{SPAN}-01", False, id="version-ff"),
        pytest.param(f"00-{TRACE.upper()}-{SPAN}-01", False, id="uppercase-hex"),
        pytest.param(f"00-{'0' * 32}-{SPAN}-01", False, id="zero-trace-id"),
        pytest.param(f"00-{TRACE}-{'0' * 16}-01", False, id="zero-span-id"),
        pytest.param(f"00-{TRACE[:-1]}-{SPAN}-01", False, id="short-trace-id"),
        pytest.param(f"00-{TRACE}-{SPAN}-1", False, id="short-flags"),
        pytest.param(f"00-{TRACE}-{SPAN}-0g", False, id="flags-not-hex"),
        pytest.param(f"00-{TRACE}-{SPAN}", False, id="three-fields"),
        pytest.param("", False, id="empty"),
        pytest.param(None, False, id="absent"),
    ],
)
def test_traceparent_is_read_only_when_valid(header: str | None, ok: bool) -> None:
    parent = tc.parse(header, "vendor=x")
    if not ok:
        assert parent is None
        return
    assert parent == tc.Parent(bytes.fromhex(TRACE), bytes.fromhex(SPAN), "vendor=x")


def test_an_oversized_tracestate_is_not_passed_on() -> None:
    parent = tc.parse(f"00-{TRACE}-{SPAN}-01", "k=" + "v" * tc.MAX_STATE)
    assert parent is not None and parent.state == ""


def test_the_header_written_names_the_span_and_the_draw() -> None:
    trace, span = bytes.fromhex(TRACE), bytes.fromhex(SPAN)
    assert tc.traceparent(trace, span, sampled=True) == f"00-{TRACE}-{SPAN}-01"
    assert tc.traceparent(trace, span, sampled=False) == f"00-{TRACE}-{SPAN}-00"
    assert tc.parse(tc.traceparent(trace, span, sampled=True)) == tc.Parent(trace, span)


@pytest.mark.parametrize(
    ("draw", "ratio", "sampled"),
    [(0.0, 0.0, False), (0.05, 0.1, True), (0.1, 0.1, False), (0.999, 1.0, True)],
)
def test_head_sampling_takes_the_draws_below_the_ratio(
    draw: float, ratio: float, sampled: bool
) -> None:
    assert tc.head(draw, ratio) is sampled


SETTINGS = tc.Settings(endpoint="http://c:4318/v1/traces")


@pytest.mark.parametrize(
    ("kw", "settings", "kept"),
    [
        pytest.param({}, SETTINGS, None, id="served-not-drawn"),
        pytest.param({"sampled": True}, SETTINGS, tc.Kept.SAMPLED, id="served-drawn"),
        pytest.param({"status": 502}, SETTINGS, tc.Kept.ERROR, id="5xx"),
        pytest.param({"status": 503, "outcome": "rejected"}, SETTINGS, tc.Kept.ERROR, id="503"),
        pytest.param({"outcome": "failed", "status": 200}, SETTINGS, tc.Kept.ERROR, id="broke"),
        pytest.param({"status": 429, "outcome": "rejected"}, SETTINGS, None, id="429-as-drawn"),
        pytest.param({"outcome": "cancelled", "status": None}, SETTINGS, None, id="client-left"),
        pytest.param({"ttft": 1.2, "objective": 1.0}, SETTINGS, tc.Kept.SLO_MISS, id="slo-miss"),
        pytest.param({"ttft": 0.9, "objective": 1.0}, SETTINGS, None, id="slo-met"),
        pytest.param({"ttft": 9.0, "objective": 0.0}, SETTINGS, None, id="no-objective"),
        pytest.param(
            {"status": 500},
            tc.Settings(endpoint="http://c", keep_errors=False),
            None,
            id="errors-off",
        ),
        pytest.param(
            {"ttft": 2.0, "objective": 1.0},
            tc.Settings(endpoint="http://c", keep_slo_misses=False),
            None,
            id="slo-misses-off",
        ),
    ],
)
def test_errors_and_slo_misses_are_kept_whatever_the_draw(
    kw: dict[str, object], settings: tc.Settings, kept: tc.Kept | None
) -> None:
    args: dict[str, object] = {
        "sampled": False,
        "status": 200,
        "outcome": "served",
        "ttft": 0.1,
        "objective": 1.0,
        **kw,
    }
    assert tc.keep(settings=settings, **args) is kept  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, tc.Settings(), id="off-by-default"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318/"},
            tc.Settings(endpoint="http://jaeger:4318/v1/traces"),
            id="base-endpoint",
        ),
        pytest.param(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/otlp/v1/traces",
                "TOKENFLEET_TRACE_SAMPLE_RATIO": "0.25",
                "TOKENFLEET_TRACE_KEEP_ERRORS": "0",
                "TOKENFLEET_TRACE_KEEP_SLO_MISSES": "off",
                "TOKENFLEET_TRACE_EXPORT_SECONDS": "0.5",
                "OTEL_SERVICE_NAME": "gw-eu",
            },
            tc.Settings(
                endpoint="https://b/otlp/v1/traces",
                ratio=0.25,
                keep_errors=False,
                keep_slo_misses=False,
                service_name="gw-eu",
                export_seconds=0.5,
            ),
            id="traces-endpoint-wins-and-every-knob",
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "none"},
            tc.Settings(),
            id="exporter-none-turns-it-off",
        ),
    ],
)
def test_settings_from_the_environment(env: dict[str, str], expected: tc.Settings) -> None:
    got = tc.Settings.from_env(env)
    assert got == expected
    assert got.on is bool(expected.endpoint)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "jaeger:4318"}, "OTEL_EXPORTER_OTLP"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://j:4317"}, "OTEL_EXPORTER_OTLP"),
        ({"TOKENFLEET_TRACE_SAMPLE_RATIO": "1.5"}, "TOKENFLEET_TRACE_SAMPLE_RATIO"),
        ({"TOKENFLEET_TRACE_SAMPLE_RATIO": "nan"}, "TOKENFLEET_TRACE_SAMPLE_RATIO"),
        ({"TOKENFLEET_TRACE_SAMPLE_RATIO": "ten%"}, "TOKENFLEET_TRACE_SAMPLE_RATIO"),
        ({"TOKENFLEET_TRACE_EXPORT_SECONDS": "0"}, "TOKENFLEET_TRACE_EXPORT_SECONDS"),
    ],
)
def test_a_value_that_cannot_be_used_is_refused_by_name(env: dict[str, str], names: str) -> None:
    with pytest.raises(tc.SettingsError, match=names):
        tc.Settings.from_env(env)
