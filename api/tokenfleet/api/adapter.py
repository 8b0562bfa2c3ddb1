"""ModelAdapter: a tenant's signed LoRA adapter, served on the pools of a base ModelDeployment.

The adapter is data, not a deployment: it runs on the base deployment's workers, which load it
at run time (vLLM's runtime LoRA API) after the worker itself has verified its signature — the
trust is the base deployment's (``spec.adapters.trust``, else its artifact's), so whoever may
create an adapter cannot also choose who may sign it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tokenfleet.api.base import (
    DNS_LABEL,
    Condition,
    Model,
    conditions_field,
    observed_generation_field,
)
from tokenfleet.api.deployment import MODEL_NAME, SignedFiles

TenantName = Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]


class AdapterArtifact(SignedFiles):
    """The adapter's files and their signature. A change here is verified again."""


class ModelAdapterSpec(Model):
    """Desired adapter."""

    base: str = Field(
        pattern=DNS_LABEL,
        max_length=63,
        description="The ModelDeployment (same namespace) whose workers serve this adapter; it "
        "must enable engine.lora.",
    )
    served_name: str = Field(
        pattern=MODEL_NAME,
        description="The name clients put in a request's model to use this adapter; unique "
        "among served models and adapters.",
    )
    artifact: AdapterArtifact = Field(description="Signed adapter files.")
    tenants: list[TenantName] = Field(
        min_length=1,
        max_length=256,
        description="Tenants (same namespace, by name) whose keys may use this adapter; no "
        "other tenant may, whatever its allowedModels say.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class ModelAdapterStatus(Model):
    """Observed state of the adapter, written by the operator."""

    observed_generation: int | None = observed_generation_field()
    digest: str = Field(default="", description="The artifact digest the verdict is about.")
    verified: bool = Field(default=False, description="Signature and every file digest checked.")
    reason: str = Field(
        default="",
        description="Verification verdict: Verified, SignatureInvalid, DigestMismatch, "
        "UntrustedSigner or ArtifactUnreachable; empty until verified.",
    )
    signer: str = Field(default="", description="Who signed the adapter, once verified.")
    loaded_replicas: int = Field(
        default=0, description="Worker replicas that have the adapter loaded now."
    )
    loaded_on: list[str] = Field(
        default_factory=list, max_length=64, description="Worker pods it is loaded on."
    )
    active_on: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Worker pods whose engine is running or queueing its requests now (vLLM's "
        "vllm:lora_requests_info).",
    )
    requests_served: int = Field(
        default=0, description="Requests the gateways served with it since they started."
    )
    conditions: list[Condition] = conditions_field()


class ModelAdapter(Model):
    """A signed LoRA adapter served on a base model's workers to the tenants it names."""

    spec: ModelAdapterSpec = Field(description="Desired adapter.")
    status: ModelAdapterStatus | None = Field(default=None, description="Observed state.")
