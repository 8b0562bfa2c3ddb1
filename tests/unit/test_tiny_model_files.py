"""What tools/tiny_model.py writes beside its models is what TokenFleet reads (no torch needed).

The build itself needs the vLLM venv (torch, a real engine) and is checked where it runs; here,
its torch-free parts against the real readers: the golden-set ConfigMap through the operator's
own parser and scorer, for answers a random model really gives (byte fragments decoded as U+FFFD,
leading spaces, runs of punctuation, YAML-looking text); the trust Secret against example 02's
shape; and the adapter tools' lock against the vLLM lock it was compiled under.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tokenfleet.api.quality import parse_golden
from tokenfleet.operator.policy import quality

REPO = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_load("vllm_host")  # tiny_model imports its sibling by name
tiny = _load("tiny_model")

ANSWERS = [
    pytest.param(" accuracy 19 accuracy 19 accuracy22SD", id="leading-space"),
    pytest.param("� half�INbin� row P503|---|---|", id="replacement-chars-and-pipes"),
    pytest.param("key: value # not a comment", id="yaml-looking"),
    pytest.param("- item\n  - nested: [1, 2]\n", id="yaml-list-with-newlines"),
    pytest.param("'quoted' and \"double\" \\ backslash", id="quotes"),
    pytest.param("trailing spaces   ", id="trailing-spaces"),
    pytest.param("\ttab\x0bvertical-tab ─ é 中", id="controls-and-unicode"),
    pytest.param("word " * 60, id="long-line-folded"),
]


@pytest.mark.parametrize("answer", ANSWERS)
def test_the_golden_set_reads_back_exactly_and_scores_its_own_answers_full(answer: str) -> None:
    reference = {case.name: answer + case.name for case in tiny.CASES}
    text = tiny.golden_config_map(reference)
    config_map = yaml.safe_load(text)
    assert config_map["metadata"]["name"] == "tiny-llama-golden"
    golden = parse_golden(config_map["data"]["golden.yaml"], loads=yaml.safe_load)
    assert {c.name: c.reference for c in golden.cases} == reference  # exact, not just stripped
    assert [c.max_tokens for c in golden.cases] == [c.max_tokens for c in tiny.CASES]
    assert quality.score(golden.cases, reference).score == 1.0
    tiny.check_golden(text, reference)


def test_a_changed_answer_fails_the_gate() -> None:
    reference = {case.name: f"answer of {case.name}" for case in tiny.CASES}
    golden = parse_golden(
        yaml.safe_load(tiny.golden_config_map(reference))["data"]["golden.yaml"],
        loads=yaml.safe_load,
    )
    worse = dict(reference, greeting="something else")
    assert tiny.differing(worse, reference) == 1
    assert quality.score(golden.cases, worse).cases_passed == len(tiny.CASES) - 1


def test_the_trust_secret_has_example_02s_shape() -> None:
    pem = (REPO / "examples/02-model-deployment/public.pem").read_text()
    ours = yaml.safe_load(tiny.trust_secret(pem))
    theirs = yaml.safe_load((REPO / "examples/02-model-deployment/trust-secret.yaml").read_text())
    assert ours["metadata"]["name"] == "tiny-llama-signing-key"
    assert ours | {"metadata": theirs["metadata"]} == theirs


def _pins(lock: Path) -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", lock.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in found}


def test_the_adapter_tools_lock_moves_nothing_the_vllm_lock_pins() -> None:
    tools = _pins(REPO / "images/worker-cpu/model-tools.lock")
    engine = _pins(REPO / "images/worker-cpu/requirements.lock")
    assert {"peft", "accelerate"} <= tools.keys()
    moved = {n: (v, engine[n]) for n, v in tools.items() if n in engine and engine[n] != v}
    assert not moved, f"recompile model-tools.lock against requirements.lock: {moved}"
    text = (REPO / "images/worker-cpu/model-tools.lock").read_text()
    unhashed = [b for b in re.split(r"\n(?=[A-Za-z])", text) if "==" in b and "--hash" not in b]
    assert not unhashed
