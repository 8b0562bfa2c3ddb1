"""Every `vllm:` metric TokenFleet reads, on a real engine's /metrics: there, typed, meaning it.

Matrix: each name in tokenfleet.signals.vllm (current name) and every `vllm:` name the operator,
gateway, worker, fleet tools, rules, dashboards and chart read (found by scanning their sources)
exists with its expected type; the deprecated aliases are absent from the real engine, and
every reader names them only as a fallback after the current name; the KV-cache usage is a
0–1 fraction (checked against the engine's own block count) that rises above 0 under load;
prefix-cache hits are counted in tokens, in whole 128-token blocks, never the prompt's last
block when the prompt ends on a block boundary (prompts of 100, 200, 384 and 434 tokens).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from engine import lane
from engine.lane import JSON
from support.cluster import wait_for
from support.vllm_engine import Engine
from tokenfleet.gateway import router
from tokenfleet.signals import queries, vllm

pytestmark = lane.TIMEOUT

REPO = Path(__file__).resolve().parents[2]
#: Where TokenFleet reads engine metrics: code, rules, dashboards, chart (not the docs, and not
#: monitoring/tests, whose synthetic series exercise the aliases on purpose).
READERS = (
    "api",
    "operator",
    "gateway",
    "worker-image",
    "fleet",
    "devstack",
    "monitoring",
    "charts",
)
#: The Prometheus type of each metric family TokenFleet reads.
TYPES = {
    vllm.RUNNING: "gauge",
    vllm.WAITING: "gauge",
    vllm.KV_CACHE_USAGE: "gauge",
    vllm.PREFIX_CACHE_QUERIES: "counter",
    vllm.PREFIX_CACHE_HITS: "counter",
    vllm.TIME_TO_FIRST_TOKEN: "histogram",
    vllm.INTER_TOKEN_LATENCY: "histogram",
    vllm.E2E_LATENCY: "histogram",
    vllm.QUEUE_TIME: "histogram",
    vllm.PROMPT_TOKENS: "counter",
    vllm.GENERATION_TOKENS: "counter",
    vllm.PREEMPTIONS: "counter",
    vllm.PREFILL_TIME: "histogram",
    vllm.DECODE_TIME: "histogram",
    vllm.ITERATION_TOKENS: "histogram",
    vllm.WAITING_BY_REASON: "gauge",
    vllm.REQUEST_SUCCESS: "counter",
    vllm.LORA_REQUESTS_INFO: "gauge",
}
ALIASES = {alias: names[0] for names in TYPES for alias in names[1:]}
BLOCK_TOKENS = 128  # the CPU backend's KV-cache block


def families(engine: Engine) -> dict[str, str]:
    """Metric family → type, from the engine's ``# TYPE`` lines."""
    return {
        m[1]: m[2]
        for m in re.finditer(r"^# TYPE (vllm:\S+) (\S+)$", engine.metrics_text(), re.MULTILINE)
    }


def family_of(name: str) -> str:
    """The family a sample name belongs to (histograms expose _bucket, _count and _sum)."""
    return re.sub(r"_(bucket|count|sum)$", "", name)


def names_read() -> dict[str, set[str]]:
    """Every `vllm:` name in TokenFleet's readers → the files naming it. A name broken across
    lines in prose (ending in ``_``) is no name."""
    found: dict[str, set[str]] = {}
    for root in READERS:
        for path in (REPO / root).rglob("*"):
            if path.suffix not in (".py", ".yaml", ".json", ".tpl") or "tests" in path.parts:
                continue
            for name in re.findall(r"vllm:[a-z0-9_:]+", path.read_text(errors="replace")):
                if not name.endswith("_"):
                    found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_name_in_signals_vllm_has_an_expected_type() -> None:
    tuples = {v for k, v in vars(vllm).items() if k.isupper() and isinstance(v, tuple)}
    assert tuples == set(TYPES)


@pytest.mark.parametrize(("names", "kind"), TYPES.items(), ids=[n[0] for n in TYPES])
def test_the_current_name_of_each_signal_exists_on_the_real_engine_with_its_type(
    engine: Engine, names: tuple[str, ...], kind: str
) -> None:
    assert families(engine).get(names[0]) == kind


def test_every_vllm_name_the_readers_read_exists_on_the_real_engine_or_is_an_alias(
    engine: Engine,
) -> None:
    exported = families(engine)
    read = names_read()
    assert len(read) >= 12, sorted(read)  # the scan found the readers
    missing = {
        name: sorted(files)
        for name, files in read.items()
        if family_of(name) not in exported and family_of(name) not in ALIASES
    }
    assert missing == {}


def test_the_deprecated_aliases_are_absent_from_the_real_engine(engine: Engine) -> None:
    exported = families(engine)
    assert ALIASES and not set(ALIASES) & set(exported)


def exprs() -> dict[str, str]:
    """Every PromQL TokenFleet evaluates that could name an alias: the rendered rules and
    dashboards, and the operator's queries."""
    out = {}
    rules = yaml.safe_load((REPO / "monitoring/rendered/rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            out[f"rule {rule.get('record') or rule.get('alert')}"] = rule["expr"]
    for path in (REPO / "monitoring/rendered/dashboards").glob("*.json"):
        for i, expr in enumerate(re.findall(r'"expr": "((?:[^"\\]|\\.)*)"', path.read_text())):
            out[f"{path.name} #{i}"] = json.loads(f'"{expr}"')
    for name in ("kv_cache_usage", "pool_ttft_p99", "running", "waiting", "generation_rate"):
        out[f"queries.{name}"] = getattr(queries, name)("ns", "p")
    out["queries.revision_inter_token_p99"] = queries.revision_inter_token_p99("ns", "m", "r", "5m")
    return out


def test_every_reader_names_an_alias_only_as_a_fallback_after_the_current_name() -> None:
    """With `a or b`, PromQL keeps b's series only where a has none: an engine exporting the
    current name is read by it, so an absent alias changes nothing."""
    checked = 0
    for where, expr in exprs().items():
        for alias, current in ALIASES.items():
            if alias not in expr:
                continue
            checked += 1
            before = expr[: expr.index(alias)]
            assert current in before and " or " in before[before.index(current) :], where
    assert checked >= 3  # the rules and the queries that carry aliases were seen


def test_the_gateway_reads_the_real_page_by_the_current_names(engine: Engine) -> None:
    load = router.parse_load(engine.metrics_text(), now=0.0)
    assert (load.running, load.waiting) == (0, 0)
    assert load.kv_usage == engine.sample(vllm.KV_CACHE_USAGE[0])


def stream(engine: Engine, prompt: list[int], max_tokens: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=120)
    body = {"model": engine.name, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    conn.request("POST", "/v1/completions", json.dumps(body), JSON)
    assert conn.getresponse().read()


def fresh_prompt(tokens: int) -> list[int]:
    """A prompt of exactly ``tokens`` token ids no earlier request shared a block with."""
    rng = random.Random(time.monotonic_ns())
    return [rng.randrange(10, 4000) for _ in range(tokens)]


def test_kv_cache_usage_is_a_fraction_of_the_engine_blocks_that_rises_under_load(
    engine: Engine,
) -> None:
    info = re.search(r"^vllm:cache_config_info\{([^}]*)\}", engine.metrics_text(), re.MULTILINE)
    assert info, "no vllm:cache_config_info"
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info[1]))
    blocks, block_size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
    assert block_size == BLOCK_TOKENS
    prompt, generated = 700, 300  # two sequences of up to 1000 tokens: 8 blocks each
    threads = [
        threading.Thread(target=stream, args=(engine, fresh_prompt(prompt), generated))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    seen = []
    while any(t.is_alive() for t in threads):
        seen.append(engine.sample(vllm.KV_CACHE_USAGE[0]))
        time.sleep(0.05)
    for t in threads:
        t.join()
    peak = max(seen)
    # both sequences whole, over the usable blocks (vLLM keeps one as its null block)
    most = 2 * -(-(prompt + generated) // block_size) / (blocks - 1)
    print(f"KV-cache usage peak {peak:.5f} of {blocks} blocks (at most {most:.5f} expected)")
    assert most / 2 < peak <= most, (peak, most)  # a percentage would be 100 times more
    wait_for(
        "the blocks to be freed",
        lambda: engine.sample(vllm.KV_CACHE_USAGE[0]) == 0,
        timeout=10,
    )


@pytest.mark.parametrize(
    ("tokens", "hits"),
    [
        pytest.param(100, 0, id="under-one-block"),
        pytest.param(200, 128, id="one-block-and-a-part"),
        pytest.param(384, 256, id="three-blocks-exactly-the-last-recomputed"),
        pytest.param(434, 384, id="three-blocks-and-a-part"),
    ],
)
def test_prefix_cache_hits_are_counted_in_tokens_of_whole_blocks(
    engine: Engine, tokens: int, hits: int
) -> None:
    prompt = fresh_prompt(tokens)
    before = [engine.sample(n[0]) for n in (vllm.PREFIX_CACHE_QUERIES, vllm.PREFIX_CACHE_HITS)]
    stream(engine, prompt, 1)
    middle = [engine.sample(n[0]) for n in (vllm.PREFIX_CACHE_QUERIES, vllm.PREFIX_CACHE_HITS)]
    stream(engine, prompt, 1)
    after = [engine.sample(n[0]) for n in (vllm.PREFIX_CACHE_QUERIES, vllm.PREFIX_CACHE_HITS)]
    assert [m - b for m, b in zip(middle, before, strict=True)] == [tokens, 0]
    assert [a - m for a, m in zip(after, middle, strict=True)] == [tokens, hits]
