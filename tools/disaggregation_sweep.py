"""Sweep the disaggregation decision over prompt/output length ratios and link bandwidths, print
the tables docs/disaggregation.md quotes and draw docs/img/disaggregation.png.

The replica and the model's shape are the example workload's
(examples/06-capacity-plan/disaggregation.yaml: the 8B-on-one-80 GB-GPU replica of
examples/05-simulations, Llama-3-8B's 128 KiB of KV per token); only the token lengths and the
bandwidth change. Each point is ``capacity.disaggregation.decide``: the split's GPUs over the
combined pool's (below 1: the split wins).

    .venv/bin/python tools/disaggregation_sweep.py [--workload W.yaml] [--png P.png]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from tokenfleet.capacity import disaggregate, disaggregation
from tokenfleet.sim import disaggregated

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = 200  # the seed's answer length; prompts vary
PROMPTS = (100, 200, 500, 1000, 2000, 4000, 8000, 16000, 32000)
BANDWIDTHS = (25.0, 100.0, 400.0, 3200.0)  # Gbit/s per GPU: 25 GbE, 100 GbE, 400G RDMA, 8x400


def ratio(w: disaggregated.Workload, prompt: float, output: float, gbps: float) -> float | None:
    """The split's replicas over the combined pool's; None when the split cannot meet TTFT."""
    t = disaggregation.Traffic(
        rps=w.rps,
        input_tokens=prompt,
        output_tokens=output,
        input_tail=prompt * 4,  # the example's p99/mean
        ttft=w.slo.ttft_p95_seconds,
        tpot=w.slo.tpot_p95_seconds,
        utilization=w.target_utilization,
    )
    link = w.link.model_copy(update={"bandwidth_gbps": gbps})
    v = disaggregation.decide(w.replica(), t, link, kv_bytes=w.model.kv_bytes_per_token())
    split = v.disaggregated_replicas
    return None if split is None else split / v.combined.replicas


def table(w: disaggregated.Workload, title: str) -> list[list[float | None]]:
    print(title)
    print(f"{'in/out':>8} " + " ".join(f"{b:>9g}G" for b in BANDWIDTHS))
    rows = []
    for prompt in PROMPTS:
        row = [ratio(w, prompt, OUTPUT, b) for b in BANDWIDTHS]
        rows.append(row)
        cells = " ".join(f"{'TTFT✗' if r is None else f'{r:.3f}':>10}" for r in row)
        print(f"{prompt / OUTPUT:8g} {cells}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--workload", type=Path, default=ROOT / "examples/06-capacity-plan/disaggregation.yaml"
    )
    parser.add_argument("--png", type=Path, default=ROOT / "docs/img/disaggregation.png")
    args = parser.parse_args()
    w = disaggregate.load(args.workload, None)
    roomy = w.model_copy(
        update={
            "performance": w.performance.model_copy(
                update={"kv_cache_tokens": 40_000_000, "max_num_seqs": 100_000}
            )
        }
    )
    print("split GPUs / combined GPUs (below 1: disaggregation wins), output 200 tokens\n")
    kv_bound = table(w, "the example's replica (KV cache 460K tokens, 384 sequences):")
    print()
    unbounded = table(roomy, "the same replica with KV and sequences unbounded (best case):")
    print()
    print()
    print("named workloads (the example's replica):")
    for name, prompt, ttft, tpot in (
        ("seed chat 1,000/200 (TTFT 1 s, TPOT 50 ms)", 1000, 1.0, 0.05),
        ("long-prompt batch 8,000/200 (TTFT 60 s, TPOT 100 ms)", 8000, 60.0, 0.1),
    ):
        for gbps in BANDWIDTHS:
            t = dataclasses.replace(
                w.traffic(), input_tokens=prompt, input_tail=prompt * 4, ttft=ttft, tpot=tpot
            )
            link = w.link.model_copy(update={"bandwidth_gbps": gbps})
            v = disaggregation.decide(w.replica(), t, link, kv_bytes=w.model.kv_bytes_per_token())
            split = v.disaggregated_replicas
            print(
                f"  {name} at {gbps:g} Gbit/s: combined {v.combined.replicas} "
                f"({v.combined.binding.value}), split {split} "
                f"({_roles(v)}): {v.winner} wins by {v.saving:.1%}"
            )
    _plot(args.png, kv_bound, unbounded)
    return 0


def _roles(v: disaggregation.Verdict) -> str:
    if v.prefill is None or v.decode is None:
        return "cannot meet TTFT"
    return (
        f"prefill {v.prefill.replicas} {v.prefill.binding.value}, "
        f"decode {v.decode.replicas} {v.decode.binding.value}"
    )


def _plot(
    png: Path, kv_bound: list[list[float | None]], unbounded: list[list[float | None]]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    ratios = [p / OUTPUT for p in PROMPTS]
    for ax, rows, title in (
        (axes[0], kv_bound, "example replica (KV-bound)"),
        (axes[1], unbounded, "KV unbounded (best case for the split)"),
    ):
        for j, gbps in enumerate(BANDWIDTHS):
            ys = [r[j] if r[j] is not None else float("nan") for r in rows]
            ax.plot(ratios, ys, marker="o", label=f"{gbps:g} Gbit/s")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("prompt / output tokens (output 200)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("GPUs: prefill + decode / combined")
    axes[0].legend(title="link per GPU")
    shape = "8B model, 128 KiB KV/token, SLO TTFT 1 s, TPOT 50 ms"
    fig.suptitle(f"Disaggregation: below 1 the split wins ({shape})")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
