"""A simulation's results for people: tables side by side, and plots over time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import Scenario


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def summary(results: Sequence[Result]) -> list[str]:
    """One row per scaler: SLO attainment and shedding per class, GPU-hours, cost."""
    oracle = next((r for r in results if r.scaler == "oracle"), None)
    classes = sorted({c for r in results for c in r.classes})
    head = f"{'scaler':20}" + "".join(f" {c[:11] + ' SLO':>16}" for c in classes)
    head += f" {'shed+timeout':>22} {'GPU-h':>8} {'x oracle':>8} {'$':>8}"
    head += f" {'$/M in':>7} {'$/M out':>7}"
    lines = [head]
    for r in results:
        row = f"{r.label:20}" + "".join(
            f" {_pct(r.classes[c]['within_slo']) if c in r.classes else '-':>16}" for c in classes
        )
        lost = ", ".join(
            f"{c[:5]} {r.classes[c]['shed'] + r.classes[c]['timed_out']:,}" for c in classes
        )
        ratio = f"{r.gpu_hours / oracle.gpu_hours:.2f}" if oracle and oracle.gpu_hours else "-"
        row += f" {lost:>22} {r.gpu_hours:8.1f} {ratio:>8} {r.cost:8.0f}"
        row += f" {r.cost_per_million_input:7.3f} {r.cost_per_million_output:7.3f}"
        lines.append(row)
    return lines


def adapters(results: Sequence[Result]) -> list[str]:
    """One row per run with LoRA requests: hit ratio, load churn, TTFT with and without."""
    runs = [r for r in results if r.adapters]
    if not runs:
        return []
    lines = [
        f"{'adapters':20} {'requests':>10} {'hit ratio':>9} {'loads':>8} {'loads/min':>9} "
        f"{'evictions':>9} {'TTFT p50':>8} {'TTFT p99':>8} {'base p50':>8} {'base p99':>8}"
    ]
    for r in runs:
        a = r.adapters
        lines.append(
            f"{r.label:20} {a['requests']:10,} {_pct(a['hit_ratio']):>9} {a['loads']:8,} "
            f"{a['loads_per_minute']:9,.1f} {a['evictions']:9,} {a['ttft_p50']:8.3f} "
            f"{a['ttft_p99']:8.3f} {a['base_ttft_p50']:8.3f} {a['base_ttft_p99']:8.3f}"
        )
    return lines


def details(result: Result) -> list[str]:
    """Per class and per tenant: outcomes, reasons, latency."""
    cores = "compiled cores" if result.compiled else "interpreted: `make native` compiles"
    lines = [
        f"{result.label}: {result.requests:,} requests in {result.cpu_seconds:.1f} s CPU "
        f"({result.speed:,.0f} requests/s simulated; {result.wall_seconds:.1f} s wall; {cores})"
    ]
    head = (
        f"  {'':14} {'arrived':>10} {'within SLO':>10} {'served':>10} {'shed':>9} "
        f"{'timed out':>9} {'failed':>7} {'TTFT p50':>8} {'TTFT p99':>8} {'ITL p99':>8}"
    )
    for title, groups in (("class", result.classes), ("tenant", result.tenants)):
        if title == "tenant" and len(groups) < 2:
            continue
        lines.append(head.replace(" " * 14, f"{title:14}", 1))
        for name, g in groups.items():
            lines.append(
                f"  {name[:14]:14} {g['arrived']:10,} {_pct(g['within_slo']):>10} "
                f"{g['served']:10,} {g['shed']:9,} {g['timed_out']:9,} {g['failed']:7,} "
                f"{g['ttft_p50']:8.3f} {g['ttft_p99']:8.3f} {g['itl_p99']:8.4f}"
            )
            if g["reasons"]:
                reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(g["reasons"].items()))
                lines.append(f"  {'':14} why: {reasons}")
    return lines


def save_json(results: Sequence[Result], path: Path) -> None:
    def plain(r: Result) -> dict[str, Any]:
        return {
            "scenario": r.scenario,
            "scaler": r.scaler,
            "adapterRouting": r.adapter_routing,
            "adapters": r.adapters,
            "requests": r.requests,
            "simulatedSeconds": r.simulated_seconds,
            "cpuSeconds": r.cpu_seconds,
            "wallSeconds": r.wall_seconds,
            "compiled": r.compiled,
            "gpuHours": r.gpu_hours,
            "cost": r.cost,
            "costPerMillionInput": r.cost_per_million_input,
            "costPerMillionOutput": r.cost_per_million_output,
            "classes": r.classes,
            "tenants": r.tenants,
            "timeline": r.timeline,
        }

    path.write_text(json.dumps([plain(r) for r in results], indent=1))


def plot(results: Sequence[Result], offered: dict[str, list[float]], path: Path) -> None:
    """Offered load, SLO attainment, replicas holding GPUs and queue age over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    load, slo, replicas, queue = axes
    for name, series in offered.items():
        load.plot(range(len(series)), series, label=name)
    load.set_ylabel("offered req/s")
    load.legend(fontsize=8, loc="upper left")
    for r in results:
        for cls, share in r.attainment.items():
            slo.plot(
                range(len(share)), [100 * x for x in share], label=f"{r.label} {cls}", linewidth=1
            )
        holding = [sum(v) for v in zip(*(t["holding"] for t in r.timeline.values()), strict=False)]
        replicas.plot(range(len(holding)), holding, label=r.label)
        oldest = [max(v) for v in zip(*(t["oldest"] for t in r.timeline.values()), strict=False)]
        queue.plot(range(len(oldest)), oldest, label=r.label, linewidth=1)
    slo.set_ylabel("% within SLO")
    slo.set_ylim(0, 101)
    slo.legend(fontsize=7, ncol=2, loc="lower left")
    replicas.set_ylabel("replicas holding GPUs")
    replicas.legend(fontsize=8, loc="upper left")
    queue.set_ylabel("oldest queued (s)")
    queue.set_xlabel("seconds")
    queue.legend(fontsize=8, loc="upper left")
    fig.suptitle(results[0].scenario if results else "")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(results: Sequence[Result], scenario: Scenario, out: Path) -> tuple[Path, Path]:
    """``results.json`` and ``timeline.png`` (with the scenario's offered load) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    offered = {
        s.name: [s.rps(t + 0.5) for t in range(int(scenario.duration_seconds))]
        for s in scenario.streams
    }
    data, png = out / "results.json", out / "timeline.png"
    save_json(results, data)
    plot(results, offered, png)
    return data, png
