"""Argo CD health checks (manifests/argocd/health/*.lua) run by a real Lua interpreter (lupa's
Lua 5.1, the dialect Argo CD embeds, and Lua 5.4) against status fixtures in tests/unit/argocd/:
Progressing during a canary, Healthy when promoted, Degraded when rolled back, unverified or
not fitting its pools' device, Suspended when paused; and the argocd-cm snippet carries exactly
the same scripts."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from tokenfleet.api.adapter import ModelAdapterStatus
from tokenfleet.api.deployment import ModelDeploymentStatus
from tokenfleet.api.pool import InferencePoolStatus
from tokenfleet.api.route import ModelRouteStatus
from tokenfleet.api.tenant import TenantStatus

REPO = Path(__file__).resolve().parents[2]
HEALTH = REPO / "manifests" / "argocd" / "health"
FIXTURES = Path(__file__).parent / "argocd"
SCRIPTS = {
    "InferencePool": "inferencepool.lua",
    "ModelDeployment": "modeldeployment.lua",
    "Tenant": "tenant.lua",
    "ModelAdapter": "modeladapter.lua",
    "ModelRoute": "modelroute.lua",
}

STATUSES: dict[str, type[BaseModel]] = {
    "InferencePool": InferencePoolStatus,
    "ModelDeployment": ModelDeploymentStatus,
    "Tenant": TenantStatus,
    "ModelAdapter": ModelAdapterStatus,
    "ModelRoute": ModelRouteStatus,
}

CASES = [
    ("modeldeployment-canary-progressing", "Progressing", "canary f6e5d4c3b2 at 50% (step 2)"),
    ("modeldeployment-verifying", "Progressing", "verifying revision f6e5d4c3b2"),
    ("modeldeployment-promoted", "Healthy", "5 replicas ready"),
    (
        "modeldeployment-rolled-back",
        "Degraded",
        "RolledBack (AnalysisFailed): canary f6e5d4c3b2 worse",
    ),
    ("modeldeployment-blocked", "Degraded", "Blocked (DigestMismatch): revision f6e5d4c3b2"),
    ("modeldeployment-unverified-no-rollout-status", "Degraded", "not verified (UntrustedSigner)"),
    ("modeldeployment-paused", "Suspended", "paused at step 1, canary f6e5d4c3b2 at 10%"),
    ("modeldeployment-stale-generation", "Progressing", "observe generation 3"),
    ("modeldeployment-no-status", "Progressing", "waiting for the operator"),
    ("modeldeployment-pool-missing", "Degraded", "does not exist"),
    ("modeldeployment-device-mismatch", "Degraded", "(ImageDeviceMismatch): engine.image"),
    ("modeldeployment-not-checked-yet-available", "Healthy", "6 replicas ready"),
    ("inferencepool-healthy", "Healthy", "6/6 replicas ready"),
    ("inferencepool-scaling", "Progressing", "2 replicas starting"),
    ("inferencepool-zone-lost", "Degraded", "ZoneLost: zone-b lost"),
    ("inferencepool-starting", "Progressing", "0 of 6 ready"),
    ("tenant-ready", "Healthy", "2 API key(s)"),
    ("tenant-no-keys", "Degraded", "tokenfleet tenant create-key"),
    ("tenant-new", "Progressing", "waiting for the operator"),
    ("modeladapter-ready", "Healthy", "loaded on 2 replica(s)"),
    ("modeladapter-tampered", "Degraded", "DigestMismatch: the adapter is refused"),
    ("modeladapter-verifying", "Progressing", "Verifying: the adapter's signature"),
    ("modelroute-ready", "Healthy", "routes to chat-large, chat-small"),
    ("modelroute-target-missing", "Degraded", "TargetNotFound: no ModelDeployment"),
    ("modelroute-stale-generation", "Progressing", "waiting for the operator"),
]


def _lua_table(lua: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return lua.table_from({k: _lua_table(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_lua_table(lua, v) for v in value])
    return value


def health(obj: dict[str, Any], *, dialect: str = "lua51") -> tuple[str, str]:
    """Run the kind's script as Argo CD does: ``obj`` global in, ``hs`` table returned."""
    lupa = importlib.import_module(f"lupa.{dialect}")
    lua = lupa.LuaRuntime()
    lua.globals().obj = _lua_table(lua, obj)
    hs = lua.execute((HEALTH / SCRIPTS[obj["kind"]]).read_text())
    return str(hs["status"]), str(hs["message"])


@pytest.mark.parametrize("dialect", ["lua51", "lua54"])
@pytest.mark.parametrize(
    ("fixture", "expected", "needle"), [pytest.param(*c, id=c[0]) for c in CASES]
)
def test_health(fixture: str, expected: str, needle: str, dialect: str) -> None:
    obj = yaml.safe_load((FIXTURES / f"{fixture}.yaml").read_text())
    status, message = health(obj, dialect=dialect)
    assert (status, needle in message) == (expected, True), message


@pytest.mark.parametrize("fixture", [c[0] for c in CASES])
def test_fixtures_are_statuses_the_operator_can_write(fixture: str) -> None:
    obj = yaml.safe_load((FIXTURES / f"{fixture}.yaml").read_text())
    if "status" in obj:
        STATUSES[obj["kind"]].model_validate(obj["status"])


def test_every_fixture_is_in_the_table() -> None:
    assert {p.stem for p in FIXTURES.glob("*.yaml")} == {c[0] for c in CASES}


def test_argocd_cm_snippet_carries_the_scripts_verbatim() -> None:
    snippet = yaml.safe_load((REPO / "manifests" / "argocd" / "argocd-cm-health.yaml").read_text())
    assert snippet["metadata"] == {"name": "argocd-cm", "namespace": "argocd"}
    data = snippet["data"]
    assert set(data) == {f"resource.customizations.health.tokenfleet.io_{k}" for k in SCRIPTS}
    for kind, script in SCRIPTS.items():
        assert (
            data[f"resource.customizations.health.tokenfleet.io_{kind}"]
            == (HEALTH / script).read_text()
        )
