"""What simulated vLLM a worker pod gets: its `vllm serve` arguments mapped onto the simulator's.

Pure: a pod object in, a :class:`SimSpec` (or None for pods that run no engine) out, and for a
pod with an ``adapter-loader`` sidecar its :class:`AdapterLoaderSpec`. The
simulator is configured from the same arguments the real engine would get, so a pod rendered by
the operator behaves here as it would on a GPU node; annotation ``sim.tokenfleet.io/args`` adds
simulator-only behaviour (latency, failure injection) for tests.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

from tokenfleet.api import labels

DEFAULT_PORT = 8000

# vLLM flags the simulator understands with the same meaning (each takes a value); the LoRA
# slots are simulated (a request for an adapter waits for a free one, as on vLLM).
_PASSED_THROUGH = ("--max-num-seqs", "--max-model-len", "--seed", "--max-loras", "--max-cpu-loras")
# vLLM flags the simulator lacks, and whether each takes a value: it always accepts runtime LoRA
# loads (nothing for --enable-lora to turn on) and loads no weights (no rank to bound), and it
# refuses flags it does not know (tokenfleet.worker.engines drops the same ones).
_NOT_SIMULATED = {"--enable-lora": False, "--max-lora-rank": True}
#: The worker pod's sidecar that loads LoRA adapters into its engine (docs/adapters.md).
ADAPTER_LOADER = "adapter-loader"
ADAPTER_LOADER_PORT = 8002


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SimSpec:
    """A simulator process for one pod."""

    pod_uid: str
    pod_key: str  # namespace/name, for logs
    pod_ip: str
    port: int
    model: str
    served_names: tuple[str, ...]
    extra_args: tuple[str, ...]
    cold_start_seconds: float = 0.0  # loading time before the engine may answer

    def env(self) -> dict[str, str]:
        """What a kubelet's downward API would give the engine (the simulator needs POD_IP)."""
        namespace, name = self.pod_key.split("/", 1)
        return {"POD_IP": self.pod_ip, "POD_NAME": name, "POD_NAMESPACE": namespace}

    def argv(self, binary: str, listen_port: int) -> list[str]:
        """Command line; the simulator binds every interface, so it gets a private port."""
        argv = [
            binary,
            "--port",
            str(listen_port),
            "--model",
            self.model,
            "--force-dummy-tokenizer",
        ]
        if self.served_names:
            argv += ["--served-model-name", *self.served_names]
        return argv + list(self.extra_args)


def is_worker(pod: dict[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("labels", {}).get(labels.ROLE) == labels.ROLE_WORKER)


def _engine_container(pod: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod.get("spec", {}).get("containers", [])
    for c in containers:
        if c.get("name") in ("vllm", "engine"):
            return c
    return containers[0] if containers else {}


def _port(container: dict[str, Any], *, name: str = "http", default: int = DEFAULT_PORT) -> int:
    ports: list[dict[str, Any]] = container.get("ports", [])
    for p in ports:
        if p.get("name") == name:
            return int(p["containerPort"])
    return int(ports[0]["containerPort"]) if ports else default


def _parse_serve_args(args: list[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(model, served names, simulator flags) from `vllm serve MODEL [flags]` style arguments."""
    model, served, passed = "", [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "serve":
            pass
        elif a in ("--model",) and i + 1 < len(args):
            model, i = args[i + 1], i + 1
        elif a == "--served-model-name":
            while i + 1 < len(args) and not args[i + 1].startswith("--"):
                served.append(args[i + 1])
                i += 1
        elif a in _PASSED_THROUGH and i + 1 < len(args):
            passed += [a, args[i + 1]]
            i += 1
        elif a in _NOT_SIMULATED:
            i += int(_NOT_SIMULATED[a])
        elif a == "--enable-prefix-caching":
            passed.append("--enable-kvcache")
        elif not a.startswith("-") and not model:
            model = a
        i += 1
    return model, tuple(served), tuple(passed)


def sim_spec(pod: dict[str, Any]) -> SimSpec | None:
    """The simulator a Running worker pod should have, or None if it should have none."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    if not is_worker(pod) or meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    if not status.get("podIP"):
        return None
    container = _engine_container(pod)
    model, served, passed = _parse_serve_args(
        [*container.get("command", []), *container.get("args", [])]
    )
    served = served or (
        (meta.get("labels", {}).get(labels.MODEL),)
        if labels.MODEL in meta.get("labels", {})
        else ()
    )
    model = model or (served[0] if served else "model")
    annotations = meta.get("annotations", {})
    extra = tuple(shlex.split(annotations.get(labels.SIM_ARGS, "")))
    try:
        cold_start = max(0.0, float(annotations.get(labels.SIM_COLD_START, "0")))
    except ValueError:
        cold_start = 0.0  # a typo must not keep the pod from ever starting
    return SimSpec(
        pod_uid=meta["uid"],
        pod_key=f"{meta.get('namespace')}/{meta.get('name')}",
        pod_ip=status["podIP"],
        port=_port(container),
        model=model,
        served_names=served,
        extra_args=passed + extra,
        cold_start_seconds=cold_start,
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactCheck:
    """What the worker entrypoint of a pod would verify, read from its container and volumes.

    ``secret``/``secret_key`` name the public key a kubelet would have mounted (the node agent
    reads it from the API instead); ``identity``/``issuer`` are a Sigstore signer.
    """

    uri: str
    digest: str
    signature_uri: str = ""
    secret: str = ""
    secret_key: str = ""
    identity: str = ""
    issuer: str = ""


#: The engine environment that declares an artifact (the operator renders both for every
#: ModelDeployment's workers, as the worker image's entrypoint requires).
ARTIFACT_ENV = ("TOKENFLEET_ARTIFACT_URI", "TOKENFLEET_ARTIFACT_DIGEST")


def artifact_check(pod: dict[str, Any]) -> ArtifactCheck | None:
    """The verification the worker image's entrypoint would run for this pod, or None.

    Every worker pod that declares an artifact is verified, as the worker image verifies every
    one: no opt-in, so a simulated engine never serves unverified files. A pod that declares
    none (a hand-made worker pod) gets None, unless it carries the old opt-in annotation
    (labels.SIM_VERIFY_ARTIFACT), which then refuses it for want of an artifact.
    """
    meta = pod.get("metadata", {})
    container = _engine_container(pod)
    env = {e["name"]: e.get("value", "") for e in container.get("env", []) if "name" in e}
    opted_in = (meta.get("annotations") or {}).get(labels.SIM_VERIFY_ARTIFACT) == "true"
    if not is_worker(pod) or not (opted_in or any(name in env for name in ARTIFACT_ENV)):
        return None
    key_path = env.get("TOKENFLEET_TRUST_PUBLIC_KEY", "")
    secret, secret_key = _mounted_secret(pod, container, key_path) if key_path else ("", "")
    return ArtifactCheck(
        uri=env.get("TOKENFLEET_ARTIFACT_URI", ""),
        digest=env.get("TOKENFLEET_ARTIFACT_DIGEST", ""),
        signature_uri=env.get("TOKENFLEET_SIGNATURE_URI", ""),
        secret=secret,
        secret_key=secret_key,
        identity=env.get("TOKENFLEET_TRUST_IDENTITY", ""),
        issuer=env.get("TOKENFLEET_TRUST_ISSUER", ""),
    )


def _mounted_secret(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) a kubelet would have put at ``path``; ("", "") if none would."""
    directory, _, file_name = path.rpartition("/")
    mount = next(
        (m for m in container.get("volumeMounts", []) if m.get("mountPath") == directory), None
    )
    volumes = pod.get("spec", {}).get("volumes", [])
    volume = next((v for v in volumes if mount and v.get("name") == mount.get("name")), None)
    if volume is None or "secret" not in volume:
        return ("", "")
    items = volume["secret"].get("items") or [{"key": file_name, "path": file_name}]
    key = next((i["key"] for i in items if i.get("path") == file_name), "")
    return (volume["secret"].get("secretName", ""), key)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdapterLoaderSpec:
    """The pod's ``adapter-loader`` sidecar, as a process beside its simulator.

    ``env`` is the container's literal environment; ``secret``/``secret_key`` name the trust
    key a kubelet would mount at ``TOKENFLEET_TRUST_PUBLIC_KEY`` (the node agent reads it from
    the API and writes it into the pod's work directory instead).
    """

    pod_uid: str
    pod_key: str
    pod_ip: str
    port: int
    env: tuple[tuple[str, str], ...]
    secret: str = ""
    secret_key: str = ""

    def process_env(
        self, *, engine_url: str, adapter_dir: Path, public_key: Path | None
    ) -> dict[str, str]:
        """The container's environment with what differs on a simulated node: the pod IP to
        bind (pods share the host's network here), the engine's private address, a per-pod
        adapter directory, and the trust key's file."""
        env = dict(self.env)
        env.update(
            TOKENFLEET_ADAPTER_PORT=str(self.port),
            TOKENFLEET_ADAPTER_ADDRESS=self.pod_ip,
            TOKENFLEET_ENGINE_URL=engine_url,
            TOKENFLEET_ADAPTER_DIR=str(adapter_dir),
        )
        if public_key is not None:
            env["TOKENFLEET_TRUST_PUBLIC_KEY"] = str(public_key)
        return env


def adapter_loader_spec(pod: dict[str, Any]) -> AdapterLoaderSpec | None:
    """The sidecar a worker pod with an ``adapter-loader`` container should have beside its
    simulator, or None (no such container, or the pod gets no simulator)."""
    spec = sim_spec(pod)
    containers: list[dict[str, Any]] = pod.get("spec", {}).get("containers", [])
    container = next((c for c in containers if c.get("name") == ADAPTER_LOADER), None)
    if spec is None or container is None:
        return None
    env = tuple((e["name"], str(e["value"])) for e in container.get("env", []) if "value" in e)
    key_path = dict(env).get("TOKENFLEET_TRUST_PUBLIC_KEY", "")
    secret, secret_key = _mounted_secret(pod, container, key_path) if key_path else ("", "")
    return AdapterLoaderSpec(
        pod_uid=spec.pod_uid,
        pod_key=spec.pod_key,
        pod_ip=spec.pod_ip,
        port=_port(container, name="adapters", default=ADAPTER_LOADER_PORT),
        env=env,
        secret=secret,
        secret_key=secret_key,
    )
