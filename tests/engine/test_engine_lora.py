"""Runtime LoRA on a real engine, through TokenFleet's own clients of it.

The adapter is the model set's ``adapters/tiny-lora-a`` when the set has one; otherwise one is
made here with peft (in the engine's venv: rank 8 on q_proj and v_proj, non-zero weights from a
fixed seed), as the model set's builder makes them. Loading through the worker's adapter sidecar
inside a pod is the real-node journeys' part.

Matrix: the sidecar's engine client (worker/engine_lora.py) loads the adapter (vLLM answers in
plain text), sees it listed, has a second load and a bad path refused with vLLM's message, and
unloads it, after which the name is unknown; the adapter is served by name with answers of its
own; while it generates, the gateway's reading of ``vllm:lora_requests_info``
(policy/adapter_loads.busy) names it, and names nothing once it is done.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import lane
from engine.lane import JSON, PATHS, send
from support import vllm_engine
from support.cluster import wait_for
from support.vllm_engine import Engine
from tokenfleet.gateway.policy import adapter_loads
from tokenfleet.worker import engine_lora

pytestmark = lane.TIMEOUT

NAME = "tiny-lora-a"
#: Runs in the engine's venv (peft is there to make adapters, not to serve them).
MAKE = r"""
import sys, torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                    init_lora_weights=False)
get_peft_model(model, config).save_pretrained(sys.argv[2])
"""


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shipped = vllm_engine.MODELS / "adapters" / NAME
    if (shipped / "adapter_config.json").exists():
        return shipped
    made = tmp_path_factory.mktemp("lora") / NAME
    source = vllm_engine.MODELS / "tiny-llama"
    done = subprocess.run(
        [str(vllm_engine.VENV / "bin" / "python"), "-c", MAKE, str(source), str(made)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return made


@pytest.fixture(scope="module")
def client(engine: Engine) -> engine_lora.Engine:
    return engine_lora.Engine(url=engine.url)


@pytest.fixture
def loaded(client: engine_lora.Engine, adapter: Path) -> Iterator[str]:
    client.load(NAME, adapter)
    yield NAME
    if NAME in client.names():
        client.unload(NAME)


def greedy(engine: Engine, model: str) -> str:
    payload = {"model": model, "prompt": "The tenancy agreement", "max_tokens": 12}
    status, raw = send(engine.port, PATHS["completion"], {**payload, "temperature": 0})
    assert status == 200, raw[:300]
    text: str = json.loads(raw)["choices"][0]["text"]
    return text


def test_the_sidecars_client_loads_lists_and_unloads_a_real_adapter(
    engine: Engine, client: engine_lora.Engine, adapter: Path
) -> None:
    client.load(NAME, adapter)  # vLLM answers 200 in plain text: the client takes the status
    assert NAME in client.names() and engine.name in client.names()
    with pytest.raises(engine_lora.EngineError, match=r"400 .*already"):
        client.load(NAME, adapter)
    client.unload(NAME)
    assert NAME not in client.names()
    with pytest.raises(engine_lora.EngineError, match=r"40\d "):
        client.unload(NAME)
    with pytest.raises(engine_lora.EngineError, match=r"404 "):
        client.load("tiny-lora-missing", adapter.parent / "no-such-adapter")
    status, _ = send(engine.port, PATHS["completion"], {"model": NAME, "prompt": "x"})
    assert status == 404  # unloaded: unknown by name


def test_a_loaded_adapter_is_served_by_name_with_answers_of_its_own(
    engine: Engine, loaded: str
) -> None:
    assert greedy(engine, loaded) != greedy(engine, engine.name)


def test_the_gateway_reads_a_running_adapter_from_lora_requests_info(
    engine: Engine, loaded: str
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=60)
    payload = {"model": loaded, "prompt": "x", "max_tokens": 600, "ignore_eos": True}
    payload["stream"] = True
    conn.request("POST", PATHS["completion"], json.dumps(payload), JSON)
    response = conn.getresponse()
    reader = threading.Thread(target=response.read, daemon=True)
    reader.start()
    wait_for(
        "the adapter to be running",
        lambda: adapter_loads.busy(engine.metrics_text()) == frozenset({loaded}),
        timeout=30,
        every=0.05,
    )
    reader.join(timeout=120)
    wait_for(
        "no adapter to be running",
        lambda: adapter_loads.busy(engine.metrics_text()) == frozenset(),
        timeout=10,
    )
