"""Jaeger in the local stack: the trace backend the gateway's OTLP spans go to.

Jaeger v2 (tools/build.sh builds it from its Go module) is an OpenTelemetry Collector build:
here with one OTLP/HTTP receiver, in-memory storage and the query service, every listener on
loopback at the ports given (its defaults — 4317/4318, 16685/16686, 13133, 8888 — would
collide with a second stack or a test's). The query service answers ``/api/traces`` (Jaeger's
JSON, microseconds) and ``/api/v3/traces`` (OTLP/JSON, nanoseconds); the web page at its root is
a placeholder in a build from the Go module (upstream builds the UI with npm).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from tokenfleet.devstack import controlplane

#: Traces kept in memory before the oldest go (a trace is a few KB: ~100 MB at most).
MAX_TRACES = 20_000
#: The local platform keeps every request's trace: it is for looking, and its load is small.
LOCAL_SAMPLE_RATIO = 1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    """Where Jaeger listens, all on 127.0.0.1."""

    otlp_http: int
    query_http: int
    query_grpc: int
    health: int

    @classmethod
    def of(cls, ports: controlplane.Ports) -> Ports:
        """The stack's Jaeger ports."""
        return cls(
            otlp_http=ports.jaeger_otlp,
            query_http=ports.jaeger_query,
            query_grpc=ports.jaeger_grpc,
            health=ports.jaeger_health,
        )

    @property
    def otlp_traces_url(self) -> str:
        """What the gateway's ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` names."""
        return f"http://127.0.0.1:{self.otlp_http}/v1/traces"

    @property
    def query_url(self) -> str:
        """The query API (and the UI's address)."""
        return f"http://127.0.0.1:{self.query_http}"


def config(ports: Ports) -> dict[str, Any]:
    """Jaeger's configuration: OTLP/HTTP in, memory storage, the query service, nothing else
    (no sampling extension, no internal metrics endpoint)."""
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
        },
        "extensions": {
            "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"127.0.0.1:{ports.health}"}},
            "jaeger_query": {
                "storage": {"traces": "memory"},
                "http": {"endpoint": f"127.0.0.1:{ports.query_http}"},
                "grpc": {"endpoint": f"127.0.0.1:{ports.query_grpc}"},
            },
            "jaeger_storage": {"backends": {"memory": {"memory": {"max_traces": MAX_TRACES}}}},
        },
        "receivers": {
            "otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{ports.otlp_http}"}}}
        },
        # a short batch: a trace is readable ~0.1 s after the gateway sent it
        "processors": {"batch": {"timeout": "100ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memory"}},
    }


def argv(binary: Path, config_path: Path, ports: Ports) -> list[str]:
    """The command line, after writing the configuration to ``config_path``."""
    config_path.write_text(yaml.safe_dump(config(ports), sort_keys=False))
    return [str(binary), "--config", str(config_path)]


def health_url(ports: Ports) -> str:
    """200 once every component started."""
    return f"http://127.0.0.1:{ports.health}/status"
