"""Tenant status from the key-count annotation: no keys says what to run; keys make it Ready."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.api.tenant import TenantStatus
from tokenfleet.operator.plan import tenant_status

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def body(count: str | None, status: TenantStatus | None = None) -> dict[str, Any]:
    annotations = {labels.API_KEY_COUNT: count} if count is not None else {}
    return {
        "metadata": {
            "name": "team",
            "namespace": "ns",
            "generation": 2,
            "annotations": annotations,
        },
        "spec": {},
        "status": status.to_wire() if status else {},
    }


@pytest.mark.parametrize(
    ("count", "keys", "ready", "reason"),
    [
        pytest.param(None, 0, "False", "NoKeys", id="never-made"),
        pytest.param("0", 0, "False", "NoKeys", id="all-revoked"),
        pytest.param("2", 2, "True", "KeysPresent", id="two-keys"),
        pytest.param("lots", 0, "False", "NoKeys", id="garbage"),
    ],
)
def test_status(count: str | None, keys: int, ready: str, reason: str) -> None:
    status, _ = tenant_status.plan_tenant(body=body(count), now=NOW)
    assert status.key_count == keys and status.observed_generation == 2
    condition = status.conditions[0]
    assert (condition.type, condition.status, condition.reason) == ("Ready", ready, reason)
    if reason == "NoKeys":
        assert "tokenfleet tenant create-key team -n ns" in condition.message


def test_an_event_only_when_keys_arrive() -> None:
    first, events = tenant_status.plan_tenant(body=body(None), now=NOW)
    assert events == []
    ready, events = tenant_status.plan_tenant(body=body("1", first), now=NOW)
    assert [e.reason for e in events] == ["KeysPresent"]
    _, again = tenant_status.plan_tenant(body=body("1", ready), now=NOW)
    assert again == []


def test_every_kind_the_loop_reports_has_an_api_path() -> None:
    from tokenfleet.operator import k8s

    for kind in ("InferencePool", "ModelDeployment", "Tenant"):
        assert k8s._path("tokenfleet.io/v1alpha1", kind, "ns", "x").endswith(
            "/ns/" + kind.lower() + "s/x"
        )
