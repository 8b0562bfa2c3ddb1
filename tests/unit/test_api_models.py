"""The pydantic API models: valid objects parse with defaults, invalid ones are refused.

Matrix: the shared table of invalid objects (one broken thing each, see support.objects) against
the models' own validation, which mirrors the CRD's CEL rules; every example YAML parses; the one
time format statuses are written in; a merge patch carries only the fields it was built with.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from support.objects import BASE, INVALID
from tokenfleet.api import base
from tokenfleet.api.adapter import ModelAdapterSpec
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec, InferencePoolStatus
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.api.tenant import TenantSpec

REPO = Path(__file__).resolve().parents[2]
SPECS: dict[str, type[BaseModel]] = {
    "InferencePool": InferencePoolSpec,
    "ModelDeployment": ModelDeploymentSpec,
    "Tenant": TenantSpec,
    "ModelAdapter": ModelAdapterSpec,
    "ModelRoute": ModelRouteSpec,
}


@pytest.mark.parametrize("kind", sorted(BASE))
def test_base_objects_are_valid(kind: str) -> None:
    SPECS[kind].model_validate(BASE[kind])


@pytest.mark.parametrize(("kind", "spec", "message"), INVALID)
def test_invalid_objects_are_refused_by_the_models_too(kind: str, spec: Any, message: str) -> None:
    with pytest.raises(ValidationError):
        SPECS[kind].model_validate(spec)


def test_defaults_fill_a_minimal_pool() -> None:
    pool = InferencePoolSpec.model_validate({})
    assert pool.replicas.min == 1 and pool.replicas.max == 10
    assert [c.name for c in pool.admission.classes] == ["critical", "interactive", "batch"]
    assert pool.routing.policy == "PrefixAware"
    assert pool.zones.topology_key == "topology.kubernetes.io/zone"


def test_models_are_frozen() -> None:
    pool = InferencePoolSpec.model_validate({})
    with pytest.raises(ValidationError):
        pool.replicas.min = 5  # type: ignore[misc]


def test_wire_form_is_camel_case_without_nulls() -> None:
    wire = TenantSpec.model_validate(BASE["Tenant"]).to_wire()
    assert "apiKeySecretRef" in wire and "api_key_secret_ref" not in wire
    assert "maxTokensCap" not in wire  # unset optional: absent, as Kubernetes spells it


def test_a_patch_carries_only_the_fields_it_was_built_with() -> None:
    condition = base.Condition(type="Ready", status="False", reason="InvalidSpec")
    status = InferencePoolStatus(observed_generation=None, conditions=[condition])
    # replicas, zones and lastScaling are left out: a merge patch keeps what is stored
    assert status.to_patch() == {
        "observedGeneration": None,
        "conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec"}],
    }
    assert status.to_wire()["replicas"] == 0 and "observedGeneration" not in status.to_wire()


UTC = datetime.UTC
PLUS_TWO = datetime.timezone(datetime.timedelta(hours=2))


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        pytest.param(
            datetime.datetime(2026, 1, 1, 12, 0, tzinfo=UTC), "2026-01-01T12:00:00Z", id="utc"
        ),
        pytest.param(
            datetime.datetime(2026, 1, 1, 0, 30, tzinfo=PLUS_TWO),
            "2025-12-31T22:30:00Z",
            id="offset-becomes-utc",
        ),
        pytest.param(
            datetime.datetime(2026, 3, 4, 5, 6, 7, 999999, tzinfo=UTC),
            "2026-03-04T05:06:07Z",
            id="whole-seconds",
        ),
    ],
)
def test_times_are_rfc3339_utc_seconds_with_z(moment: datetime.datetime, text: str) -> None:
    assert base.rfc3339(moment) == text
    assert base.from_rfc3339(text) == moment.replace(microsecond=0)


@pytest.mark.parametrize("text", ["yesterday-ish", "", "2026-13-01T00:00:00Z"])
def test_an_unreadable_time_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        base.from_rfc3339(text)


def test_the_group_and_version_are_spelled_once() -> None:
    assert (
        base.API_GROUP_VERSION == f"{base.API_GROUP}/{base.API_VERSION}" == "tokenfleet.io/v1alpha1"
    )


def _example_documents() -> list[Any]:
    docs = []
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("apiVersion", "").startswith("tokenfleet.io/"):
                docs.append(pytest.param(doc, id=f"{path.parent.name}/{doc['metadata']['name']}"))
    return docs


@pytest.mark.parametrize("doc", _example_documents())
def test_every_example_parses(doc: Any) -> None:
    SPECS[doc["kind"]].model_validate(doc["spec"])
