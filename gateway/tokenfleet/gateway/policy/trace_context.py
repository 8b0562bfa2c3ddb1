"""W3C trace context and which requests' traces are kept: pure values and decisions.

A traced request carries a trace id and its spans' ids (:mod:`..stages.timeline`); the engine
it is sent to gets a ``traceparent`` naming the attempt's span, so the engine's own spans (vLLM
exports OTLP) join the gateway's trace. An incoming ``traceparent`` is honoured: the request's
spans join the caller's trace under the caller's span.

Which traces are exported is decided when the request has ended (:func:`keep`), so the
requests worth reading are never lost to a coin toss:

- **errors** — an answer or refusal with a 5xx status, or an upstream failure — always;
- **SLO misses** — a first token later than its class's objective (``ttft_target``) — always;
- **the rest** by head sampling: the ``ratio`` of requests, drawn once when the request
  begins (the engine is told the draw in ``traceparent``'s sampled flag, so with a parent-based
  sampler it records the same requests). The draw is the gateway's own: a caller's sampled
  flag is not trusted, or any client could have every one of its requests exported.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

HEADER = "traceparent"
STATE_HEADER = "tracestate"
#: tracestate is propagated as received up to this many characters (W3C: at most 32 entries).
MAX_STATE = 512
DEFAULT_RATIO = 0.1
"""Head sampling's default share: errors and SLO misses are kept besides, whatever it is."""
SERVICE_NAME = "tokenfleet-gateway"

_HEX = frozenset("0123456789abcdef")


class Parent(NamedTuple):
    """A caller's trace context, from its ``traceparent``."""

    trace_id: bytes  # 16 bytes
    span_id: bytes  # 8 bytes: the caller's span, our root span's parent
    state: str = ""  # its tracestate, passed on unchanged


def _hex(text: str, size: int) -> bytes | None:
    if len(text) != size * 2 or not _HEX.issuperset(text):
        return None
    raw = bytes.fromhex(text)
    return None if raw == bytes(size) else raw  # all zeros is invalid


def parse(header: str | None, state: str | None = None) -> Parent | None:
    """The caller's context if ``header`` is a valid traceparent, else None (W3C trace
    context level 1: a version this does not know is read by its first four fields)."""
    if not header:
        return None
    text = header.strip()
    fields = text.split("-")
    if len(fields) < 4:
        return None
    version, trace, span, flags = fields[:4]
    if len(version) != 2 or not _HEX.issuperset(version) or version == "ff":
        return None
    if version == "00" and len(fields) != 4:
        return None
    if len(flags) != 2 or not _HEX.issuperset(flags):
        return None
    trace_id, span_id = _hex(trace, 16), _hex(span, 8)
    if trace_id is None or span_id is None:
        return None
    passed = (state or "").strip()
    return Parent(trace_id, span_id, passed if len(passed) <= MAX_STATE else "")


def traceparent(trace_id: bytes, span_id: bytes, *, sampled: bool) -> str:
    """The header that makes ``span_id`` of ``trace_id`` the parent of what is called."""
    return f"00-{trace_id.hex()}-{span_id.hex()}-{'01' if sampled else '00'}"


def head(draw: float, ratio: float) -> bool:
    """Head sampling: whether a request whose uniform ``draw`` in [0, 1) is in the ``ratio``."""
    return draw < ratio


class Kept(enum.StrEnum):
    """Why a request's trace was exported (a metric label and a root span attribute)."""

    ERROR = "error"
    SLO_MISS = "slo_miss"
    SAMPLED = "sampled"


#: Not kept: the metric label of a dropped trace.
DROPPED = "dropped"


def keep(
    *,
    sampled: bool,
    status: int | None,
    outcome: str,
    ttft: float | None,
    objective: float,
    settings: Settings,
) -> Kept | None:
    """Why the ended request's trace is exported, or None to drop it.

    ``status``: the HTTP status the client got (None: none known, e.g. it left first);
    ``ttft``: seconds to its first byte (None: none came); ``objective``: its class's TTFT
    objective in seconds (0: none)."""
    if settings.keep_errors and (outcome == "failed" or (status or 0) >= 500):
        return Kept.ERROR
    if settings.keep_slo_misses and objective > 0 and ttft is not None and ttft > objective:
        return Kept.SLO_MISS
    return Kept.SAMPLED if sampled else None


class SettingsError(ValueError):
    """A tracing setting that cannot be used (its message says which and why)."""


_OFF = ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How the gateway traces (environment: docs/observability.md, "Traces")."""

    endpoint: str = ""
    """The OTLP/HTTP traces URL (``…/v1/traces``); "" turns tracing off (the default)."""
    ratio: float = DEFAULT_RATIO
    """Head sampling: the share of requests whose traces are kept, in [0, 1]."""
    keep_errors: bool = True
    """Keep every trace that ended in an error (5xx or an upstream failure)."""
    keep_slo_misses: bool = True
    """Keep every trace whose first token missed its class's objective."""
    service_name: str = SERVICE_NAME
    export_seconds: float = 1.0
    """Kept spans are sent at least this often (and at once when a batch is full)."""

    @property
    def on(self) -> bool:
        return bool(self.endpoint)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """From the standard OpenTelemetry variables for where spans go
        (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` +
        ``/v1/traces``; ``OTEL_TRACES_EXPORTER=none`` turns it off; ``OTEL_SERVICE_NAME``) and
        TokenFleet's for what is kept (``TOKENFLEET_TRACE_SAMPLE_RATIO``,
        ``TOKENFLEET_TRACE_KEEP_ERRORS``, ``TOKENFLEET_TRACE_KEEP_SLO_MISSES``,
        ``TOKENFLEET_TRACE_EXPORT_SECONDS``). Raises SettingsError on a value it cannot use."""
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if not endpoint and (base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()):
            endpoint = base.rstrip("/") + "/v1/traces"
        if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            endpoint = ""
        if endpoint:
            url = urlsplit(endpoint)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise SettingsError(
                    f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an http(s) URL, got {endpoint!r}"
                )
        ratio = _number(env, "TOKENFLEET_TRACE_SAMPLE_RATIO", DEFAULT_RATIO)
        if not 0.0 <= ratio <= 1.0:
            raise SettingsError(f"TOKENFLEET_TRACE_SAMPLE_RATIO must be in [0, 1], got {ratio}")
        every = _number(env, "TOKENFLEET_TRACE_EXPORT_SECONDS", 1.0)
        if not 0.01 <= every <= 60:
            raise SettingsError(
                f"TOKENFLEET_TRACE_EXPORT_SECONDS must be in [0.01, 60], got {every}"
            )
        return cls(
            endpoint=endpoint,
            ratio=ratio,
            keep_errors=env.get("TOKENFLEET_TRACE_KEEP_ERRORS", "1").strip().lower() not in _OFF,
            keep_slo_misses=env.get("TOKENFLEET_TRACE_KEEP_SLO_MISSES", "1").strip().lower()
            not in _OFF,
            service_name=env.get("OTEL_SERVICE_NAME", "").strip() or SERVICE_NAME,
            export_seconds=every,
        )


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None


class Kind(enum.IntEnum):
    """OTLP's span kinds (the values its wire format uses)."""

    INTERNAL = 1
    SERVER = 2
    CLIENT = 3


Attribute = str | int | float | bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Span:
    """One finished span of a kept trace, as it is exported (times in Unix nanoseconds)."""

    name: str
    trace_id: bytes
    span_id: bytes
    parent_id: bytes | None
    start_ns: int
    end_ns: int
    kind: Kind = Kind.INTERNAL
    attributes: Mapping[str, Attribute] = dataclasses.field(default_factory=dict)
    error: str = ""
    """Set: the span failed, and this says why (OTLP status ERROR with this message)."""
