"""The pools as the models see them: each pool's spec, which ModelDeployments claim it (the
winner first), and a model's spec fitted to its pools. Read once per pass, for pools and models
alike."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import pydantic

from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import devices, model_status
from tokenfleet.operator.reconcilers import indexed


def fit(
    spec: ModelDeploymentSpec,
    ns: str,
    specs: Mapping[tuple[str, str], InferencePoolSpec],
    allowed_images: tuple[str, ...],
) -> devices.Fit:
    """The spec fitted to its pools in ``ns`` (plan.devices): what every planner is given."""
    return devices.fit(
        spec,
        pools={p: specs[(ns, p)] for p in spec.pools if (ns, p) in specs},
        allowed_images=allowed_images,
    )


def pool_specs(indexes: indexed.Indexes) -> dict[tuple[str, str], InferencePoolSpec]:
    """(namespace, pool) → its spec, for fitting models to their pools' device; a pool
    whose spec does not parse is left out (its own pass reports it)."""
    specs = {}
    for body in indexed.bodies(indexes.pools):
        meta = body["metadata"]
        with contextlib.suppress(pydantic.ValidationError):
            specs[(meta["namespace"], meta["name"])] = InferencePoolSpec.model_validate(
                body.get("spec", {})
            )
    return specs


def claims(indexes: indexed.Indexes) -> dict[tuple[str, str], list[str]]:
    """(namespace, pool) → names of ModelDeployments listing it, the winner first."""
    found_claims: dict[tuple[str, str], list[model_status.Claim]] = {}
    for body in indexed.bodies(indexes.models):
        meta = body["metadata"]
        for pool in body.get("spec", {}).get("pools", []):
            claim = model_status.Claim(created=meta.get("creationTimestamp", ""), name=meta["name"])
            found_claims.setdefault((meta["namespace"], pool), []).append(claim)
    return {
        key: [c.name for c in sorted(found, key=model_status.Claim.key)]
        for key, found in found_claims.items()
    }
