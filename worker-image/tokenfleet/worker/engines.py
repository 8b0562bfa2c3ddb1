"""The engine a verified worker execs, and its argv from the operator's ``vllm serve`` arguments.

Pure: arguments in, argv out. The operator renders one set of arguments (``vllm serve``'s); the
image chooses the engine (``TOKENFLEET_ENGINE``): vLLM in the GPU image (the default), or
llm-d-inference-sim in the worker-simulator image, which gets the equivalent flags. The
simulator knows only some of vLLM's flags; the rest describe GPUs it does not have and are
dropped (listed below, so a new rendered flag is a decision, not an accident).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

VLLM = "vllm"
SIMULATOR = "llm-d-inference-sim"
ENGINES = (VLLM, SIMULATOR)

#: What an image's engine is built for (its Dockerfile's ``TOKENFLEET_DEVICE``) and what a
#: pool's nodes have (``TOKENFLEET_POOL_DEVICE``, rendered by the operator for CPU pools);
#: absent means gpu in both, as every image and pool was before CPU pools.
DEVICES = ("gpu", "cpu")
#: Engines that serve on either device: the simulator loads no weights.
_ANY_DEVICE = (SIMULATOR,)

#: vLLM flags the simulator takes with the same meaning (each takes one value). The LoRA slots
#: (``--max-loras``: adapters in one batch, ``--max-cpu-loras``: adapters kept loaded) are
#: simulated: a request for an adapter waits for a free slot as on vLLM.
_SAME_MEANING = (
    "--port",
    "--max-num-seqs",
    "--max-model-len",
    "--seed",
    "--max-loras",
    "--max-cpu-loras",
)
#: vLLM flags with a value that describe GPU memory and parallelism, the KV cache's size and
#: the engine's shutdown wait (a CPU pool's), or the adapters' weight shapes
#: (``--max-lora-rank``): no meaning for an engine that loads no weights.
_GPU_ONLY = (
    "--tensor-parallel-size",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--shutdown-timeout",
    "--max-lora-rank",
)
#: vLLM switches the simulator lacks because it is always so: it always accepts runtime LoRA
#: loads (``/v1/load_lora_adapter``), so ``--enable-lora`` has nothing to turn on (and the
#: simulator refuses flags it does not know).
_ALWAYS_ON = ("--enable-lora",)


def device_mismatch(engine: str, *, image: str, pool: str) -> str:
    """Why ``engine``, in an image built for the ``image`` device, must not serve on a pool of
    ``pool`` nodes; "" when it may. vLLM's GPU build finds no GPU on a CPU node, and its CPU
    build on a GPU node would be given a GPU memory share it reads as the host's memory."""
    if engine in _ANY_DEVICE or image == pool:
        return ""
    return (
        f"this image's engine is built for {image} (TOKENFLEET_DEVICE) but the pool runs on "
        f"{pool} nodes (TOKENFLEET_POOL_DEVICE): the engine was not started; run the pool's "
        f"default image (remove engine.image) or an image built for {pool}"
    )


def argv(engine: str, args: Sequence[str], *, served: str, env: Mapping[str, str]) -> list[str]:
    """The engine's argv serving directory ``served``; ``args`` are ``vllm serve``'s options
    (without the model). Raises ValueError for an unknown engine."""
    if engine == VLLM:
        return [VLLM, "serve", served, *args]
    if engine == SIMULATOR:
        return [SIMULATOR, *simulator_args(args, served=served, env=env)]
    raise ValueError(f"TOKENFLEET_ENGINE must be one of {', '.join(ENGINES)}, not {engine!r}")


def simulator_args(args: Sequence[str], *, served: str, env: Mapping[str, str]) -> list[str]:
    """llm-d-inference-sim's flags equivalent to ``vllm serve``'s ``args``.

    The tokenizer is the simulator's dummy one (the artifact's files are verified, not loaded).
    Prefix caching maps onto its KV-cache simulation, which needs ``POD_IP`` (it names the pod
    in its KV events); without it the flag is dropped rather than crashing the engine.
    """
    out = ["--model", served, "--force-dummy-tokenizer"]
    i = 0
    while i < len(args):
        flag = args[i]
        value = args[i + 1] if i + 1 < len(args) else ""
        if flag in _SAME_MEANING:
            out += [flag, value]
            i += 2
        elif flag in _GPU_ONLY:
            i += 2
        elif flag == "--served-model-name":
            names = []
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                names.append(args[i])
                i += 1
            out += [flag, *names]
        elif flag == "--enable-prefix-caching":
            out += ["--enable-kvcache"] if env.get("POD_IP") else []
            i += 1
        elif flag == "--no-enable-prefix-caching" or flag in _ALWAYS_ON:
            i += 1
        else:  # anything else (engine.extraArgs) is passed as given: the simulator judges it
            out.append(flag)
            i += 1
    return out
