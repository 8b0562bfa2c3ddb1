"""Two real third-party load tools, guidellm and inference-perf, against the gateway and direct.

One llm-d-inference-sim (20 ms to the first token, then 5 ms a token), Redis, and TokenFleet's
gateway in front of it (static mode, default configuration, access log on, to a file). Each tool
runs twice with the same settings, straight at the simulator and through the gateway with the
tenant's API key as its bearer token: a constant request rate, synthetic prompts of 128 tokens
asking for 64 output tokens (ignore_eos), streamed, counted with a small byte-level BPE tokenizer
trained here at run time (no model hub). guidellm sends /v1/chat/completions (its default, after
its default backend check ``GET /health`` and model discovery ``GET /v1/models``);
inference-perf sends /v1/completions (its ``random`` data, the one with fixed token counts,
serves only the completion API). Each tool's own JSON report gives one row: requests/s
completed, TTFT, TPOT ((last token − first token) / (tokens − 1) per request, the server's token
count) and end-to-end latency at p50/p99, errors, and "cut" (in flight when the run's time was
up: guidellm cancels those, inference-perf waits for them); then gateway − direct. A third row
per tool is the gateway's own view of the same requests, from its access log (``ttft_ms`` is
from the request's arrival to the backend's first byte), with its outcome counts.

    .venv/bin/python bench/real_clients.py [--quick] [--rate 20] [--seconds 30]

The tools live in bench/.venv-clients (``make bench/.venv-clients/.installed``); a tool missing
from there is skipped and said so. All on one 2-core machine: the tools, the simulator and the
gateway share the cores, so the latencies include everyone's contention.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _processes import free_port, start, wait_port
from gateway_overhead import BIN, KEY, Proxy, load, start_tokenfleet, stop

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "bench" / ".venv-clients" / "bin"
PROMPT_TOKENS, OUTPUT_TOKENS = 128, 64
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

#: Run with the clients' venv python: a byte-level BPE (any text encodes) trained on seeded
#: Faker text, saved as a Hugging Face tokenizer directory both tools load by path.
MAKE_TOKENIZER = """
import sys
from faker import Faker
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

fake = Faker()
fake.seed_instance(0)
corpus = [fake.paragraph(nb_sentences=8) for _ in range(3000)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=2000,
    special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
)
tok.train_from_iterator(corpus, trainer)
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
    unk_token="<|endoftext|>", model_max_length=4096,
)
fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\\n{% endfor %}"
fast.save_pretrained(sys.argv[1])
"""


@dataclasses.dataclass
class Row:
    tool: str
    target: str
    rps: float | None  # completed requests per second (None: not measured by this source)
    ttft: tuple[float, float]  # ms, p50 and p99
    tpot: tuple[float, float]  # ms
    e2e: tuple[float, float]  # ms
    ok: int
    errors: int
    cut: int = 0  # in flight when the run's time was up (guidellm cancels them)
    outcomes: str = ""  # the gateway log's outcome counts


@dataclasses.dataclass
class Target:
    name: str  # direct | gateway
    base: str
    key: str | None


def run_logged(argv: list[str], log: Path, timeout: float) -> int:
    with log.open("wb") as out:
        try:
            return subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **OFFLINE},
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            return -1


def failed(tool: str, target: str, rc: int, log: Path) -> None:
    tail = log.read_text(errors="replace").splitlines()[-25:]
    print(f"  {tool} → {target} FAILED (exit {rc}); last lines of {log}:", flush=True)
    for line in tail:
        print(f"    | {line}")


def guidellm(target: Target, tok: Path, tmp: Path, rate: float, seconds: int) -> Row | None:
    out = tmp / f"guidellm-{target.name}.json"
    backend: dict[str, Any] = {"kind": "openai_http", "target": target.base}
    if target.key:  # nothing else: its default /health check and /v1/models discovery
        backend["api_key"] = target.key
    data = {
        "kind": "synthetic_text",
        "prompt_tokens": PROMPT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
    }
    argv = [
        str(CLIENTS / "guidellm"),
        "run",
        "--backend",
        json.dumps(backend),
        "--profile",
        json.dumps({"kind": "constant", "rate": rate}),
        "--constraint",
        json.dumps({"kind": "max_duration", "seconds": seconds}),
        "--data",
        json.dumps(data),
        "--tokenizer",
        json.dumps({"kind": "huggingface_auto", "model": str(tok)}),
        "--output",
        json.dumps({"kind": "json", "path": str(out)}),
        "--disable-console-interactive",
    ]
    log = tmp / f"guidellm-{target.name}.log"
    rc = run_logged(argv, log, timeout=seconds + 240)
    if rc != 0 or not out.exists():
        failed("guidellm", target.name, rc, log)
        return None
    metrics = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def pcts(name: str, scale: float = 1.0) -> tuple[float, float]:
        p = metrics[name]["successful"]["percentiles"]
        return p["p50"] * scale, p["p99"] * scale

    totals = metrics["request_totals"]
    return Row(
        "guidellm",
        target.name,
        metrics["requests_per_second"]["successful"]["mean"],
        pcts("time_to_first_token_ms"),
        # guidellm's "ITL" is (latency − TTFT) / (tokens − 1) per request; its "TPOT" counts the
        # first token's wait too. The former is what inference-perf calls TPOT.
        pcts("inter_token_latency_ms"),
        pcts("request_latency", 1000.0),
        int(totals["successful"]),
        int(totals["errored"]),
        int(totals["incomplete"]),
    )


def inference_perf(target: Target, tok: Path, tmp: Path, rate: float, seconds: int) -> Row | None:
    out = tmp / f"inference-perf-{target.name}"
    fixed = {"min": PROMPT_TOKENS, "max": PROMPT_TOKENS, "mean": PROMPT_TOKENS, "std_dev": 0}
    config = {
        "api": {"type": "completion", "streaming": True},
        "data": {
            "type": "random",
            "input_distribution": fixed,
            "output_distribution": {
                "min": OUTPUT_TOKENS,
                "max": OUTPUT_TOKENS,
                "mean": OUTPUT_TOKENS,
                "std_dev": 0,
            },
        },
        "load": {
            "type": "constant",
            "stages": [{"rate": rate, "duration": seconds}],
            "num_workers": 1,
        },
        "server": {
            "type": "vllm",
            "base_url": target.base,
            # Named: inference-perf 0.7.0 discovers the model with GET /v1/models *without* its
            # api_key, which the gateway (like vLLM with --api-key) answers 401.
            "model_name": "m",
            "ignore_eos": True,
            **({"api_key": target.key} if target.key else {}),
        },
        "tokenizer": {"pretrained_model_name_or_path": str(tok)},
        "storage": {"local_storage": {"path": str(out)}},
        "report": {
            "request_lifecycle": {
                "summary": True,
                "per_stage": False,
                "percentiles": [50, 99],
                "use_server_output_tokens": True,
            }
        },
    }
    path = tmp / f"inference-perf-{target.name}.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    log = tmp / f"inference-perf-{target.name}.log"
    rc = run_logged(
        [str(CLIENTS / "inference-perf"), "--config_file", str(path)], log, timeout=seconds + 240
    )
    summary = out / "summary_lifecycle_metrics.json"
    if rc != 0 or not summary.exists():
        failed("inference-perf", target.name, rc, log)
        return None
    report = json.loads(summary.read_text())
    ok = report["successes"]
    latency = ok["latency"]

    def pcts(name: str) -> tuple[float, float]:
        return latency[name]["median"] * 1000, latency[name]["p99"] * 1000

    return Row(
        "inference-perf",
        target.name,
        ok["throughput"]["requests_per_sec"],
        pcts("time_to_first_token"),
        pcts("time_per_output_token"),
        pcts("request_latency"),
        int(ok["count"]),
        int(report["failures"]["count"]),
    )


def gateway_view(tool: str, log: Path, offset: int) -> Row:
    """The gateway's access-log lines after ``offset``: its own TTFT, TPOT and total."""
    entries = []
    with log.open("rb") as f:
        f.seek(offset)
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "total_ms" in entry:
                entries.append(entry)

    def cut(e: dict[str, Any]) -> bool:  # the tool left before the answer was whole
        short = (e.get("completion_tokens") or OUTPUT_TOKENS) < OUTPUT_TOKENS
        return e.get("status") is None or (e.get("outcome") == "cancelled" and short)

    good = [e for e in entries if e.get("status") == 200 and e.get("ttft_ms") and not cut(e)]
    # A 200 answered in full that the log calls cancelled: the client closed its connection
    # before the gateway had settled the request (see the report's note).
    cut_short = sum(1 for e in good if e.get("outcome") == "cancelled")
    left = sum(1 for e in entries if cut(e))
    outcomes = collections.Counter(
        f"{e.get('outcome')}/{e.get('reason')}" if e.get("reason") else str(e.get("outcome"))
        for e in entries
    )

    def pcts(values: list[float]) -> tuple[float, float]:
        if len(values) < 2:
            return float("nan"), float("nan")
        q = statistics.quantiles(values, n=100)
        return statistics.median(values), q[98]

    tpot = [
        (e["total_ms"] - e["ttft_ms"]) / (e["completion_tokens"] - 1)
        for e in good
        if (e.get("completion_tokens") or 0) > 1
    ]
    return Row(
        tool,
        "gateway log",
        None,
        pcts([e["ttft_ms"] for e in good]),
        pcts(tpot),
        pcts([e["total_ms"] for e in good]),
        len(good),
        len(entries) - len(good) - left,
        left,
        outcomes=", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        + (f" ({cut_short} of them 200s answered in full)" if cut_short else ""),
    )


def make_tokenizer(tmp: Path) -> Path:
    tok = tmp / "tokenizer"
    subprocess.run(
        [str(CLIENTS / "python"), "-c", MAKE_TOKENIZER, str(tok)],
        check=True,
        env={**os.environ, **OFFLINE},
    )
    return tok


def report(rows: list[Row], rate: float, seconds: int) -> None:
    print(
        f"\nconstant {rate:g} req/s for {seconds} s, {PROMPT_TOKENS} prompt tokens → "
        f"{OUTPUT_TOKENS} output tokens, streamed; simulator 20 ms TTFT + 5 ms/token; ms unless noted"
    )
    head = (
        f"{'tool':15} {'target':17} {'req/s':>6} {'TTFT p50':>8} {'p99':>7} {'TPOT p50':>8} "
        f"{'p99':>6} {'e2e p50':>8} {'p99':>7} {'ok':>5} {'errors':>6} {'cut':>4}"
    )
    print(head)
    print("-" * len(head))

    def line(r: Row, target: str | None = None, signed: bool = False) -> str:
        f = "+8.2f" if signed else "8.2f"
        g = "+7.2f" if signed else "7.2f"
        rps = "-" if r.rps is None else format(r.rps, "+6.2f" if signed else "6.2f")
        return (
            f"{r.tool:15} {target or r.target:17} {rps:>6} {r.ttft[0]:{f}} {r.ttft[1]:{g}} "
            f"{r.tpot[0]:{f}} {r.tpot[1]:{'+6.2f' if signed else '6.2f'}} {r.e2e[0]:{f}} "
            f"{r.e2e[1]:{g}} {r.ok:5d} {r.errors:6d} {r.cut:4d}"
        )

    for tool in dict.fromkeys(r.tool for r in rows):
        mine = {r.target: r for r in rows if r.tool == tool}
        for r in mine.values():
            print(line(r))
            if r.outcomes:
                print(f"{'':15} {'':17} outcomes: {r.outcomes}")
        d, g = mine.get("direct"), mine.get("gateway")
        if d and g:

            def sub(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
                return a[0] - b[0], a[1] - b[1]

            delta = Row(
                tool,
                "gateway − direct",
                (g.rps or 0) - (d.rps or 0),
                sub(g.ttft, d.ttft),
                sub(g.tpot, d.tpot),
                sub(g.e2e, d.e2e),
                g.ok - d.ok,
                g.errors - d.errors,
                g.cut - d.cut,
            )
            print(line(delta, signed=True))


def start_stack(tmp: Path, running: list[subprocess.Popen[bytes]]) -> tuple[int, Proxy]:
    """The simulator, Redis and the gateway (each appended to ``running`` as it starts)."""
    sim_port, redis_port = free_port(), free_port()
    simulator = [
        str(BIN / "llm-d-inference-sim"),
        "--port",
        str(sim_port),
        "--model",
        "m",
        "--force-dummy-tokenizer",
        "--max-num-seqs",
        "256",
        "--time-to-first-token",
        "20ms",
        "--inter-token-latency",
        "5ms",
        "--seed",
        "1",
    ]
    running.append(start(simulator, tmp / "simulator.log", {"POD_IP": "127.0.0.1"}))
    redis = [shutil.which("redis-server") or "redis-server", "--port", str(redis_port)]
    running.append(start([*redis, "--save", ""], tmp / "redis.log"))
    wait_port(sim_port)
    wait_port(redis_port)
    gateway = start_tokenfleet(tmp, sim_port, f"redis://127.0.0.1:{redis_port}/0")
    assert gateway.process is not None
    running.append(gateway.process)
    return sim_port, gateway


def say_skipped(tools: dict[str, bool]) -> None:
    for name, present in tools.items():
        if not present:
            print(
                f"\n*** {name} is NOT installed in bench/.venv-clients: SKIPPED "
                "(make bench/.venv-clients/.installed) ***\n",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke run)")
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument("--seconds", type=int, help="each run's duration (default 30, quick 5)")
    args = parser.parse_args()
    seconds = args.seconds or (5 if args.quick else 30)

    tools = {name: (CLIENTS / name).exists() for name in ("guidellm", "inference-perf")}
    say_skipped(tools)
    if not any(tools.values()):
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="tf-real-clients-"))
    print(f"logs and reports in {tmp}", flush=True)
    tok = make_tokenizer(tmp)
    running: list[subprocess.Popen[bytes]] = []
    rows: list[Row] = []
    runners = {"guidellm": guidellm, "inference-perf": inference_perf}
    try:
        sim_port, gateway = start_stack(tmp, running)
        gateway_log = tmp / f"tokenfleet-{gateway.base.rsplit(':', 1)[1]}.log"
        targets = [
            Target("direct", f"http://127.0.0.1:{sim_port}", None),
            Target("gateway", gateway.base, KEY),
        ]
        # Warm both paths (the simulator's, the gateway's and Redis's first requests are slow)
        # so the first tool's direct run does not pay for everyone's start.
        for proxy in (Proxy("direct", targets[0].base, {}, None), gateway):
            asyncio.run(load(proxy, connections=8, total=80, stream=True))
        for tool, runner in runners.items():
            for target in targets if tools[tool] else []:
                print(
                    f"  {tool} → {target.name} ({seconds} s at {args.rate:g} req/s) ...", flush=True
                )
                offset = gateway_log.stat().st_size
                began = time.monotonic()
                row = runner(target, tok, tmp, args.rate, seconds)
                print(f"    took {time.monotonic() - began:.0f} s", flush=True)
                rows += [row] if row is not None else []
                if target.name == "gateway":
                    time.sleep(0.5)  # the access-log writer thread's last lines
                    rows.append(gateway_view(tool, gateway_log, offset))
    finally:
        for process in reversed(running):
            stop(process)
    report(rows, args.rate, seconds)
    say_skipped(tools)
    return 0


if __name__ == "__main__":
    sys.exit(main())
