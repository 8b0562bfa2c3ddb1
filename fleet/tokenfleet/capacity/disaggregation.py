"""Prefill/decode disaggregation as a planning decision (pure): size a combined pool and a
prefill + decode pair for the same workload and SLO, and say which wins, by how much, and which
resource binds.

The replica is the simulator's step model (``tokenfleet.sim.scenario.Performance``, fitted to a
measured profile by ``tokenfleet.sim.calibrate``): an engine step takes
``base + per_sequence x running + per_token x prefill tokens`` seconds. From it:

- **combined** (today's pool, chunked prefill): the rate at which the mean step equals the
  TPOT objective, capped by sequences and KV (``scalers.sustainable_rps``). Prefill shares the
  steps, so every prompt token lengthens every running sequence's step.
- **prefill pool**: full steps of ``maxNumBatchedTokens`` prompt tokens, so a prompt costs
  ``input x (per_token + base / chunk)`` seconds of engine; it sends the prompt's KV
  (``input x kv_bytes_per_token``) over its NIC.
- **decode pool**: steps of decodes only: ``b`` sequences at ``base + per_sequence x b`` ≤ the
  TPOT objective, and ``b`` ≤ ``maxNumSeqs`` and ≤ KV cache / context (decode holds the whole
  context); it receives the same bytes.
- **the network**: a NIC of ``bandwidth`` per replica, at most ``target_utilization`` busy, on
  both ends; and the first token waits for the whole transfer: ``latency + bytes / bandwidth``
  must fit the TTFT objective beside the prefill.

Each resource is a requests/s ceiling per replica; the lowest binds. Replicas =
ceil(rate / (ceiling x target utilisation)); GPUs compared at the same utilisation. What the
model leaves out is in docs/disaggregation.md (roofline overlap of prefill and decode in one
step, per-token tails, prefix caching, parallelism that differs per phase).
"""

from __future__ import annotations

import dataclasses
import enum
import math

from pydantic import Field

from tokenfleet.api.base import Model

GBIT = 1e9 / 8  # bytes/s in one Gbit/s


class Resource(enum.StrEnum):
    PREFILL_COMPUTE = "prefill compute"
    DECODE_BANDWIDTH = "decode memory bandwidth"  # the per-sequence step cost at the TPOT target
    KV_CAPACITY = "KV capacity"
    SEQUENCES = "max sequences"
    NETWORK = "the network"
    TTFT = "TTFT (transfer time)"


class ModelShape(Model):
    """The served model's attention shape: what one token of KV cache weighs."""

    layers: int = Field(default=32, ge=1, description="Transformer layers.")
    kv_heads: int = Field(default=8, ge=1, description="KV heads (GQA groups).")
    head_dim: int = Field(default=128, ge=1, description="Dimension per head.")
    dtype_bytes: int = Field(default=2, ge=1, description="Bytes per KV element (2: fp16/bf16).")

    def kv_bytes_per_token(self) -> int:
        """layers x kv_heads x head_dim x 2 (K and V) x dtype bytes: 128 KiB for Llama-3-8B."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes


class Link(Model):
    """The network between a prefill replica and a decode replica (per replica NIC)."""

    bandwidth_gbps: float = Field(default=100.0, gt=0, description="Gbit/s per replica.")
    latency_ms: float = Field(default=0.5, ge=0, description="Per transfer: setup + RTT.")
    loss: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Share of transfers lost (a decode replica gone, a connection reset): the "
        "request is prefilled again.",
    )

    def seconds(self, tokens: float, kv_bytes: int) -> float:
        return self.latency_ms / 1000 + tokens * kv_bytes / (self.bandwidth_gbps * GBIT)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Replica:
    """The step model's coefficients (``Performance``'s, as plain values)."""

    base: float
    per_sequence: float
    per_token: float
    chunk: int
    max_seqs: int
    kv_tokens: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Traffic:
    rps: float
    input_tokens: float  # mean
    output_tokens: float  # mean
    input_tail: float  # the prompt length the TTFT check uses (p99 when known)
    ttft: float  # objective, seconds
    tpot: float  # objective, seconds per output token
    utilization: float  # share of each ceiling planned for


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    role: str  # combined | prefill | decode
    replicas: int
    per_replica_rps: float
    binding: Resource
    ceilings: dict[Resource, float]  # requests/s per replica by resource

    @property
    def feasible(self) -> bool:
        return self.per_replica_rps > 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    combined: Pool
    prefill: Pool | None  # None: disaggregation cannot meet the TTFT objective
    decode: Pool | None
    transfer_seconds: float  # the TTFT check's prompt over the link, unqueued
    winner: str  # combined | disaggregated | neither (no replica meets the TPOT objective)
    saving: float  # the loser's GPUs over the winner's − 1
    binding: Resource  # what limits the winner (its larger pool's binding resource)

    @property
    def disaggregated_replicas(self) -> int | None:
        if self.prefill is None or self.decode is None:
            return None
        return self.prefill.replicas + self.decode.replicas


def _pool(role: str, rps: float, ceilings: dict[Resource, float], util: float) -> Pool:
    binding = min(ceilings, key=lambda r: ceilings[r])
    per = ceilings[binding]
    replicas = math.ceil(rps / (per * util) - 1e-9) if per > 0 else 0
    return Pool(
        role=role, replicas=replicas, per_replica_rps=per, binding=binding, ceilings=ceilings
    )


def combined(r: Replica, t: Traffic, *, kv_bytes: int) -> Pool:
    """Today's pool: chunked prefill in the decoding steps."""
    del kv_bytes  # nothing crosses a network
    work = r.per_sequence * t.output_tokens + r.per_token * t.input_tokens
    # the mean step at the TPOT objective: T = base + rate x work x T (Little's law per step)
    by_latency = (1 - r.base / t.tpot) / work
    per_token_bound = (
        Resource.PREFILL_COMPUTE
        if (r.per_token * t.input_tokens > r.per_sequence * t.output_tokens)
        else Resource.DECODE_BANDWIDTH
    )
    ceilings = {per_token_bound: by_latency}
    for resource, seqs in (
        (Resource.SEQUENCES, float(r.max_seqs)),
        (Resource.KV_CAPACITY, r.kv_tokens / (t.input_tokens + t.output_tokens)),
    ):
        # at a sequence cap b: T = base / (1 − rate x work) and rate x output x T = b
        ceilings[resource] = seqs / (t.output_tokens * r.base + seqs * work)
    return _pool("combined", t.rps, ceilings, t.utilization)


def prefill(r: Replica, t: Traffic, link: Link, *, kv_bytes: int) -> Pool:
    """Prefill-only replicas: full chunks; each prompt's KV leaves through the NIC. A lost
    transfer is prefilled again, so each pool does 1 / (1 − loss) of the work."""
    engine = t.input_tokens * (r.per_token + r.base / r.chunk)
    again = 1 / (1 - link.loss)
    ceilings = {
        Resource.PREFILL_COMPUTE: 1 / (engine * again),
        Resource.NETWORK: link.bandwidth_gbps * GBIT / (t.input_tokens * kv_bytes * again),
    }
    return _pool("prefill", t.rps, ceilings, t.utilization)


def decode(r: Replica, t: Traffic, link: Link, *, kv_bytes: int) -> Pool:
    """Decode-only replicas: the largest batch within the TPOT objective, the sequence cap and
    the KV cache; they receive each prompt's KV."""
    context = t.input_tokens + t.output_tokens
    limits = {
        Resource.DECODE_BANDWIDTH: (t.tpot - r.base) / r.per_sequence
        if r.per_sequence
        else math.inf,
        Resource.SEQUENCES: float(r.max_seqs),
        Resource.KV_CAPACITY: r.kv_tokens / context,
    }
    ceilings = {
        res: b / (t.output_tokens * (r.base + r.per_sequence * b)) for res, b in limits.items()
    }
    ceilings[Resource.NETWORK] = link.bandwidth_gbps * GBIT / (t.input_tokens * kv_bytes)
    return _pool("decode", t.rps, ceilings, t.utilization)


def decide(r: Replica, t: Traffic, link: Link, *, kv_bytes: int) -> Verdict:
    """Both designs for one workload, the cheaper one and what binds it."""
    one = combined(r, t, kv_bytes=kv_bytes)
    transfer = link.seconds(t.input_tail, kv_bytes)
    prefill_time = t.input_tail * (r.per_token + r.base / r.chunk) + r.base
    first_decode = r.base  # the first token comes from the decode pool's next step
    if prefill_time + transfer + first_decode > t.ttft:
        return Verdict(
            combined=one,
            prefill=None,
            decode=None,
            transfer_seconds=transfer,
            winner="combined",
            saving=math.inf,
            binding=one.binding,
        )
    p = prefill(r, t, link, kv_bytes=kv_bytes)
    d = decode(r, t, link, kv_bytes=kv_bytes)
    split = p.replicas + d.replicas
    if not (p.feasible and d.feasible):
        winner = "combined" if one.feasible else "neither"
        return Verdict(
            combined=one,
            prefill=None,
            decode=None,
            transfer_seconds=transfer,
            winner=winner,
            saving=math.inf,
            binding=one.binding if one.feasible else d.binding,
        )
    if not one.feasible or split < one.replicas:
        bigger = p if p.replicas >= d.replicas else d
        saving = one.replicas / split - 1 if one.feasible else math.inf
        winner, binding = "disaggregated", bigger.binding
    else:
        winner, saving, binding = "combined", split / max(1, one.replicas) - 1, one.binding
    return Verdict(
        combined=one,
        prefill=p,
        decode=d,
        transfer_seconds=transfer,
        winner=winner,
        saving=saving,
        binding=binding,
    )
