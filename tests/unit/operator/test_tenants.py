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


def _secret(name: str, *managers: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "managedFields": list(managers)}


def _manager(*entries: str) -> dict[str, Any]:
    data = {".": {}, **{f"f:{e}": {} for e in entries}}
    return {"manager": "kubectl-create", "fieldsV1": {"f:data": data, "f:type": {}}}


def _with_ref(spec: dict[str, Any]) -> dict[str, Any]:
    b = body(None)
    b["spec"] = {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": ["m"], **spec}
    return b


@pytest.mark.parametrize(
    ("secrets", "keys"),
    [
        pytest.param([], 0, id="no-secret"),
        pytest.param([_secret("team-keys", _manager("key-1", "key-2"))], 2, id="kubectl-create"),
        pytest.param(
            [_secret("team-keys", _manager("key-1"), _manager("key-1", "key-3"))],
            2,
            id="two-managers-union",
        ),
        pytest.param([_secret("other-keys", _manager("key-1"))], 0, id="another-tenants-secret"),
        pytest.param(
            [_secret("team-keys", {"manager": "kubectl-label", "fieldsV1": {"f:metadata": {}}})],
            0,
            id="label-only-manager-has-no-data",
        ),
    ],
)
def test_keys_are_counted_from_secret_metadata(secrets: list[dict[str, Any]], keys: int) -> None:
    index = tenant_status.key_index(secrets)
    b = _with_ref({})
    b["metadata"]["annotations"] = {labels.API_KEY_COUNT: "7"}  # the Secrets win once read
    status, _ = tenant_status.plan_tenant(body=b, now=NOW, key_secrets=index)
    assert status.key_count == keys


def test_budget_state_condition_and_event_from_the_ledger() -> None:
    b = _with_ref({"budget": {"tokens": 1000, "action": "Notify", "period": "Daily"}})
    within, events = tenant_status.plan_tenant(body=b, now=NOW, key_secrets={}, budget_used=250)
    assert within.budget is not None and within.budget.used_percent == 25 and events == []
    b["status"] = within.to_wire()
    spent, events = tenant_status.plan_tenant(
        body=b, now=NOW, key_secrets={}, budget_used=1000, last_used=NOW
    )
    assert spent.budget is not None and spent.budget.state == "Exhausted"
    assert spent.budget.resets_at == "2026-01-02T00:00:00Z"
    assert spent.last_used == "2026-01-01T00:00:00Z"
    exceeded = [c for c in spent.conditions if c.type == "BudgetExceeded"]
    assert [c.status for c in exceeded] == ["True"]
    assert [e.reason for e in events] == ["BudgetSpent"]
