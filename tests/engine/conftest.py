"""One real vLLM for the whole real-engine lane (tests/engine/), started once and stopped when
the lane's last test is done (package scope: this folder is a package for that alone).

One engine costs about 4 GiB and 20–240 s to start on a shared 2-core machine, so every module
of the lane shares it, one at a time. Its flags are the operator's CPU shape
(support.vllm_engine.argv) plus what the lane's checks need (lane.ENGINE_ARGS): a batch of two
sequences, so a burst of a dozen requests is a full batch and a queue (readiness, the capacity
knee); prefix caching (cache_salt, the prefix-hit counters); LoRA enabled
(vllm:lora_requests_info). Tests read the engine's counters as deltas, so their order does not
matter. Gateway modules put a static-mode TokenFleet gateway (and a real Redis) in front of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine import lane
from support import vllm_engine
from support.gateway import Gateway, Redis, free_port, running, start_gateway


@pytest.fixture(scope="package")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[vllm_engine.Engine]:
    with vllm_engine.running(tmp_path_factory.mktemp("vllm"), args=lane.ENGINE_ARGS) as started:
        yield started


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    server = Redis(port=free_port(), log=tmp_path_factory.mktemp("redis") / "redis.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def gateway(
    engine: vllm_engine.Engine, redis: Redis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gateway")
    with running(start_gateway(tmp, lane.gateway_config(engine), "--redis", redis.url)) as front:
        yield front
    assert "Traceback" not in front.log.read_text(), front.log.read_text()[-3000:]
