"""The `vllm serve` flags a ModelDeployment's ``engine.extraArgs`` may not pass (one home).

Why a denylist and not an allowlist: ``extraArgs`` exists for the hundreds of engine flags the
typed settings do not name (vLLM adds some every release); an allowlist would make it the typed
settings again, one release behind. What it must not do is widen the engine's reach, so each
flag below is refused for one of four reasons:

- **who can reach it**: the address, port and key it serves on are the operator's (the
  NetworkPolicy and the engine key in plan.isolation depend on them), and so is CORS;
- **what it loads beyond the verified artifact**: adapters at start, a tokenizer or config from
  elsewhere (a hub download is an unverified artifact), a config file that could set any flag;
- **what code it imports**: middleware, plugins, logits processors, worker extensions name
  Python to import into the engine;
- **where tenants' data leaves the pod**: request logs with prompts, traces, KV events and KV
  transfer to another endpoint, and files the engine may read on a prompt's behalf.

vLLM spells flags with dashes or underscores and accepts ``--flag=value``: both are checked.
The same rule is a CEL rule on the CRD (the API server refuses such a spec at once) and a
pydantic check (the operator never renders one that got past an older CRD).
"""

from __future__ import annotations

from collections.abc import Sequence

#: Flag → why it is refused (shown in the error).
REFUSED: dict[str, str] = {
    "--host": "the operator decides where the engine listens",
    "--port": "the operator decides where the engine listens",
    "--uds": "the operator decides where the engine listens",
    "--api-key": "the engine key comes from the pool's Secret, never from the spec",
    "--allowed-origins": "CORS would let browsers on other origins call the engine",
    "--allow-credentials": "CORS would let browsers on other origins call the engine",
    "--root-path": "the gateway and probes call the engine at its root",
    "--served-model-name": "the model's name comes from spec.model (the gateway routes on it)",
    "--lora-modules": "adapters are loaded only after verification (ModelAdapter)",
    "--enable-lora-bias": "adapters are shaped by engine.lora, not free flags",
    "--tokenizer": "the tokenizer is the verified artifact's",
    "--hf-config-path": "the model's config is the verified artifact's",
    "--config": "a config file could set any refused flag",
    "--allowed-local-media-path": "prompts could read the worker's files",
    "--middleware": "imports Python into the engine",
    "--tool-parser-plugin": "imports Python into the engine",
    "--logits-processors": "imports Python into the engine",
    "--worker-extension-cls": "imports Python into the engine",
    "--enable-log-requests": "tenants' prompts would reach the logs",
    "--otlp-traces-endpoint": "requests would be traced to another endpoint",
    "--kv-events-config": "KV-cache events would be published outside the pod",
    "--kv-transfer-config": "KV cache would be transferred outside the pod",
}


def flag_of(arg: str) -> str:
    """``--Some_Flag=x`` → ``--some-flag``; an argument that is not a long flag → ``""``."""
    if not arg.startswith("--"):
        return ""
    return "--" + arg[2:].split("=", 1)[0].replace("_", "-").lower()


def refusals(args: Sequence[str]) -> list[str]:
    """One message per refused flag in ``args``, in order."""
    return [f"{arg}: {REFUSED[flag_of(arg)]}" for arg in args if flag_of(arg) in REFUSED]


def cel_refused(arg: str) -> str:
    """The same check in CEL: true when the string ``arg`` is a refused flag. Case is not folded
    there (lowerAscii doubles the rule's estimated cost): vLLM's flags are case-sensitive, so
    ``--HOST`` is no flag to it; pydantic refuses it anyway."""
    names = "|".join(sorted(flag[2:] for flag in REFUSED))
    pattern = names.replace("-", "[-_]")
    return f"{arg}.matches('^--({pattern})(=.*)?$')"
