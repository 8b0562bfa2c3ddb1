"""The pydantic API models: valid objects parse with defaults, invalid ones are refused.

Matrix: the shared table of invalid objects (one broken thing each, see support.objects) against
the models' own validation, which mirrors the CRD's CEL rules; every example YAML parses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from support.objects import BASE, INVALID
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.api.tenant import TenantSpec

REPO = Path(__file__).resolve().parents[2]
SPECS: dict[str, type[BaseModel]] = {
    "InferencePool": InferencePoolSpec,
    "ModelDeployment": ModelDeploymentSpec,
    "Tenant": TenantSpec,
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
