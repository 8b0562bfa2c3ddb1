"""The replica's two prefill models. ``chunked`` (vLLM): a prompt prefills in the engine's steps,
so decoding sequences wait while it does. ``separate`` (llm-d-inference-sim, or prefill on other
GPUs): every prompt's first token comes after its own prefill time, and decoding keeps its pace."""

from __future__ import annotations

import pytest

from tokenfleet.sim.replica import Replica, Request
from tokenfleet.sim.scenario import Performance

BASE, PER_TOKEN = 0.025, 0.0001


def request(index: int, arrival: float, prompt: int, output: int) -> Request:
    return Request(
        index=index,
        stream=0,
        cls="c",
        arrival=arrival,
        deadline=1e9,
        input_tokens=prompt,
        output_tokens=output,
        prefix=-1,
        prefix_tokens=0,
    )


def serve(mode: str, arrivals: list[tuple[float, int, int]]) -> list[Request]:
    perf = Performance(
        step_base_seconds=BASE,
        step_per_sequence_seconds=0,
        prefill_per_token_seconds=PER_TOKEN,
        max_num_seqs=8,
        cold_start_seconds=0,
        prefill_mode=mode,  # type: ignore[arg-type]
    )
    replica = Replica(0, "z", perf, created=0.0)
    done: list[Request] = []

    def first(req: Request, at: float) -> None:
        req.first_token = at

    def finished(req: Request, at: float) -> None:
        req.finished = at
        done.append(req)

    reqs = [request(i, at, p, o) for i, (at, p, o) in enumerate(arrivals)]
    for req in reqs:
        replica.accept(req, req.arrival, first, finished)
    replica.advance(60.0, first, finished)
    assert len(done) == len(reqs)
    return reqs


def test_separate_prefill_is_each_prompts_own_and_leaves_decoding_alone() -> None:
    # a long answer, then five 2,000-token prompts arriving while it decodes
    reqs = serve("separate", [(0.0, 100, 101), *[(0.5 + 0.1 * i, 2000, 2) for i in range(5)]])
    long, *others = reqs
    assert long.first_token == pytest.approx(100 * PER_TOKEN)
    assert long.finished is not None and long.first_token is not None
    assert (long.finished - long.first_token) / 100 == pytest.approx(BASE)  # never slowed
    for r in others:  # in parallel, not queued behind each other
        assert r.first_token == pytest.approx(r.arrival + 2000 * PER_TOKEN)


def test_chunked_prefill_slows_the_running_sequences() -> None:
    reqs = serve("chunked", [(0.0, 100, 101), *[(0.5 + 0.1 * i, 2000, 2) for i in range(5)]])
    long, *others = reqs
    assert long.finished is not None and long.first_token is not None
    # five prefills of 0.2 s each stalled its steps: a second more over 100 tokens
    assert (long.finished - long.first_token) / 100 > BASE * 1.3
    assert others[-1].first_token is not None
    assert others[-1].first_token - others[-1].arrival > 2000 * PER_TOKEN  # queued behind
