"""What the real-engine lane's modules share: the engine's flags, the gateway put in front of
it, and one way to send a request to either."""

from __future__ import annotations

import http.client
import json
import uuid
from typing import Any

import pytest

from support import vllm_engine
from support.gateway import key_hash

#: Every lane module's timeout: pytest-timeout counts the engine's start (up to
#: START_TIMEOUT_SECONDS on a loaded machine) in the first test that needs it.
TIMEOUT = pytest.mark.timeout(int(vllm_engine.START_TIMEOUT_SECONDS) + 300)

#: Sequences the engine batches at once: a burst of 12 is a full batch plus a queue of 10.
MAX_NUM_SEQS = 2
#: The engine's flags beyond the operator's CPU shape (support.vllm_engine.argv).
ENGINE_ARGS = (
    "--enable-prefix-caching",
    "--max-num-seqs",
    str(MAX_NUM_SEQS),
    "--enable-lora",
    "--max-lora-rank",
    "8",
)
#: API keys of the gateway's tenants: two isolated ones, two sharing the cache group "evals".
KEYS = {name: f"tfk-lane-{name}-" + "0" * 30 for name in ("a", "b", "evals-1", "evals-2")}
#: The served revision: the response cache keys on it (a model without one is never cached).
REVISION = "r1"
PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
JSON = {"Content-Type": "application/json"}


def gateway_config(engine: vllm_engine.Engine) -> dict[str, Any]:
    """A static-mode gateway whose one model is the real engine (as integration tests put one
    in front of simulators), with the response cache on and token quotas to settle against."""
    group = {"cacheIsolation": {"mode": "SharedGroup", "group": "evals"}}
    quota = {"quotas": {"tokensPerDay": 10_000_000}}
    return {
        "models": [
            {
                "name": engine.name,
                "endpoints": [engine.url],
                "revision": REVISION,
                "maxConcurrency": 16,
                "responseCache": {"enabled": True, "ttlSeconds": 300, "maxEntryBytes": 65536},
            }
        ],
        "tenants": [
            {"name": name, "apiKeyHashes": [key_hash(key)], "allowedModels": ["*"]}
            | (group if name.startswith("evals") else quota)
            for name, key in KEYS.items()
        ],
    }


def send(
    port: int, path: str, payload: dict[str, Any], *, key: str = "", request_id: str = ""
) -> tuple[int, bytes]:
    """POST ``payload`` to 127.0.0.1:``port`` (the engine, or the gateway with a tenant's
    ``key``): (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {**JSON, "X-Request-Id": request_id or uuid.uuid4().hex}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", path, json.dumps(payload), headers)
    response = conn.getresponse()
    return response.status, response.read()
