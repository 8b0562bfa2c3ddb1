"""Child manifests the operator wants to exist (pure: specs in, dicts out).

One worker Deployment per pool, zone and revision, pinned to its zone; a PodDisruptionBudget and
a headless Service per pool. Every manifest carries a hash of itself in an annotation, so the
shell applies a child only when that hash changed.

A GPU pool's worker requests its GPUs and gets ``--gpu-memory-utilization``; a CPU pool's
requests cores and memory and gets an explicit KV-cache size, its thread binding and a
shutdown timeout instead (plan.cpu_workers). A spec reaches here fitted to its pools
(plan.devices); a misfit is held by the pool plan, never rendered.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from tokenfleet.api import base, engine_key, labels, quantity
from tokenfleet.api.deployment import DEFAULT_IMAGES, ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import adapter_loader, cpu_workers, isolation, verify_step
from tokenfleet.operator.policy import revisions

Manifest = dict[str, Any]

#: Where the worker's init step puts the verified artifact; vLLM serves it from there.
MODEL_DIR = "/models/artifact"
HTTP_PORT = 8000
#: Where the trust Secret (the signer's public key) is mounted in the worker container.
TRUST_DIR = "/etc/tokenfleet/trust"
TRUST_VOLUME = "artifact-trust"
APPLIED_HASH = f"{labels.PREFIX}/applied-hash"
#: Seconds between the drain's end (preStop returns) and SIGKILL: vLLM's own shutdown.
SIGTERM_MARGIN_SECONDS = 15
#: Startup probe budget floor: loading 100+ GB of weights takes minutes.
MIN_STARTUP_SECONDS = 600

# A readiness probe that needs the model loaded and answering, not just the HTTP server up
# (vLLM's /health answers 200 while its engine core is wedged). An engine with requests in it
# is ready when its token counters move within half a second; only an idle one (or one that
# makes no progress) is asked for one token of completion. A completion sent to a busy engine
# waits behind its whole queue: on a real engine with a full batch and ten queued it took
# 5.5-12 s against a 4 s timeout, turning a saturated, healthy replica NotReady when it is
# needed most. /metrics unreadable (another server) falls back to the completion. http.client,
# not urllib.request: half the interpreter's start (0.3 s against 0.7 s on an idle core).
# vLLM's image ships python3. The engine key (plan.isolation), when the pod has one, goes
# with every request: vLLM refuses /v1 without it.
_PROBE = (
    "import http.client as h,json,os,re,sys,time\n"
    f"k=os.environ.get('{isolation.KEY_ENV}')\n"
    "H={'Content-Type':'application/json',**({'Authorization':'Bearer '+k} if k else {})}\n"
    "def g(path,body=None,t=2):\n"
    f" c=h.HTTPConnection('127.0.0.1:{HTTP_PORT}',timeout=t)\n"
    " c.request('POST' if body else 'GET',path,body,H)\n"
    " r=c.getresponse();return r.status,r.read().decode()\n"
    "def m():\n"
    " try:t=g('/metrics')[1]\n"
    " except Exception:return 0,0\n"
    r" s=lambda n:sum(map(float,re.findall('^vllm:'+n+r'(?:\{.*\})? (\S+)$',t,re.M)))"
    "\n"
    " return s('num_requests_running')+s('num_requests_waiting'),"
    "s('generation_tokens_total')+s('prompt_tokens_total')\n"
    "busy,done=m()\n"
    "if busy:\n"
    " time.sleep(0.5)\n"
    " if m()[1]>done:sys.exit(0)\n"
    "p=json.dumps({'model':sys.argv[1],'prompt':'ping','max_tokens':1})\n"
    "sys.exit(0 if g('/v1/completions',p,3)[0]==200 else 1)"
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """An object children point at (ownerReferences), for garbage collection."""

    kind: str
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": base.API_GROUP_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def revision_of(spec: ModelDeploymentSpec) -> str:
    """A short hash of what makes a revision: the artifact and the engine settings."""
    return revisions.revision_of(spec)


def worker_name(pool: str, zone: str, revision: str) -> str:
    return f"{pool}-{zone}-{revision}"[:63].rstrip("-")


def serve_args(spec: ModelDeploymentSpec, *, cpu: cpu_workers.CpuWorker | None = None) -> list[str]:
    """`vllm serve` arguments from the typed engine settings; ``cpu`` is the worker's sizing
    on a CPU pool (None: a GPU pool), which takes the place of the GPU memory share."""
    engine = spec.engine
    args = [MODEL_DIR, "--served-model-name", spec.model.name, *spec.model.aliases]
    args += ["--port", str(HTTP_PORT), "--tensor-parallel-size", str(engine.tensor_parallel_size)]
    if cpu is not None:  # never a GPU share: vLLM's CPU build reads it as the host's memory
        args += cpu_workers.engine_args(cpu)
    else:
        args += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
        if engine.kv_cache_memory is not None:
            args += ["--kv-cache-memory-bytes", str(quantity.whole_bytes(engine.kv_cache_memory))]
    args.append(
        "--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    if engine.max_model_len is not None:
        args += ["--max-model-len", str(engine.max_model_len)]
    if engine.max_num_seqs is not None:
        args += ["--max-num-seqs", str(engine.max_num_seqs)]
    if engine.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(engine.max_num_batched_tokens)]
    if engine.enable_chunked_prefill is not None:
        on = engine.enable_chunked_prefill
        args.append("--enable-chunked-prefill" if on else "--no-enable-chunked-prefill")
    for flag, value in (
        ("--quantization", engine.quantization),
        ("--dtype", engine.dtype),
        ("--kv-cache-dtype", engine.kv_cache_dtype),
        ("--speculative-config", engine.speculative_config),
    ):
        if value is not None:
            args += [flag, value]
    if engine.lora is not None:
        args += ["--enable-lora", "--max-loras", str(engine.lora.max_loras)]
        args += ["--max-lora-rank", str(engine.lora.max_lora_rank)]
        if engine.lora.max_cpu_loras is not None:
            args += ["--max-cpu-loras", str(engine.lora.max_cpu_loras)]
    return args + list(engine.extra_args)


def worker_resources(spec: ModelDeploymentSpec, gpus: dict[str, str]) -> dict[str, Any]:
    """GPUs requested and limited; CPU requested; memory requested and limited (no overcommit)."""
    requests, limits = dict(gpus), dict(gpus)
    wanted = spec.engine.resources
    if wanted is not None and wanted.cpu is not None:
        requests["cpu"] = wanted.cpu
    if wanted is not None and wanted.memory is not None:
        requests["memory"] = limits["memory"] = wanted.memory
    return {"requests": requests, "limits": limits}


def device_parts(
    *, pool_name: str, pool: InferencePoolSpec, model: ModelDeploymentSpec
) -> tuple[list[str], list[dict[str, str]], dict[str, Any]]:
    """The engine's arguments, the environment its device adds, and the container's resources:
    a GPU pool's as they always were; a CPU pool's sized by plan.cpu_workers."""
    accel = pool.accelerator
    if accel.kind == "GPU":
        gpus = {accel.resource_name: str(accel.count)}
        return serve_args(model), [], worker_resources(model, gpus)
    worker = cpu_workers.size(pool, model.engine, pool_name=pool_name)
    if isinstance(worker, cpu_workers.Misfit):  # plan.pools holds a misfit: a caller's bug
        raise ValueError(f"pool {pool_name}: {worker.reason}: {worker.message}")
    return serve_args(model, cpu=worker), cpu_workers.env(worker), cpu_workers.resources(worker)


def artifact_env(spec: ModelDeploymentSpec) -> list[dict[str, str]]:
    """What the worker entrypoint (tokenfleet.worker) needs to verify before it serves."""
    artifact, trust = spec.artifact, spec.artifact.trust
    env = [
        {"name": "TOKENFLEET_ARTIFACT_URI", "value": artifact.uri},
        {"name": "TOKENFLEET_ARTIFACT_DIGEST", "value": artifact.digest},
        {"name": "TOKENFLEET_MODEL_DIR", "value": MODEL_DIR},
    ]
    if artifact.signature_uri:
        env.append({"name": "TOKENFLEET_SIGNATURE_URI", "value": artifact.signature_uri})
    if trust.public_key is not None:
        path = f"{TRUST_DIR}/{trust.public_key.key}"
        env.append({"name": "TOKENFLEET_TRUST_PUBLIC_KEY", "value": path})
    if trust.sigstore is not None:
        env.append({"name": "TOKENFLEET_TRUST_IDENTITY", "value": trust.sigstore.identity})
        env.append({"name": "TOKENFLEET_TRUST_ISSUER", "value": trust.sigstore.issuer})
    return env


def trust_volumes(spec: ModelDeploymentSpec) -> list[dict[str, Any]]:
    """The public-key Secret as a read-only volume (none for Sigstore identities)."""
    key = spec.artifact.trust.public_key
    if key is None:
        return []
    return [
        {
            "name": TRUST_VOLUME,
            "secret": {"secretName": key.name, "items": [{"key": key.key, "path": key.key}]},
        }
    ]


def trust_mounts(spec: ModelDeploymentSpec) -> list[dict[str, Any]]:
    if spec.artifact.trust.public_key is None:
        return []
    return [{"name": TRUST_VOLUME, "mountPath": TRUST_DIR, "readOnly": True}]


def _probes(pool: InferencePoolSpec, model_name: str) -> dict[str, Any]:
    startup_seconds = max(MIN_STARTUP_SECONDS, 2 * pool.autoscaling.readiness_delay_seconds)
    health = {"httpGet": {"path": "/health", "port": HTTP_PORT}}
    return {
        "startupProbe": {
            **health,
            "periodSeconds": 10,
            "failureThreshold": math.ceil(startup_seconds / 10),
        },
        "livenessProbe": {
            **health,
            "periodSeconds": 15,
            "timeoutSeconds": 5,
            "failureThreshold": 4,
        },
        "readinessProbe": {
            "exec": {"command": ["python3", "-c", _PROBE, model_name]},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }


def drain_hook(pool: InferencePoolSpec) -> dict[str, Any]:
    """preStop: wait until the engine's running requests reach 0, up to the pool's longest
    generation (the gateway already sends a terminating pod nothing new)."""
    return {
        "exec": {
            "command": [
                "python3",
                "-m",
                "tokenfleet.worker.drain",
                "--url",
                f"http://127.0.0.1:{HTTP_PORT}/metrics",
                "--max-seconds",
                str(pool.drain.max_generation_seconds),
            ]
        }
    }


def grace_seconds(pool: InferencePoolSpec) -> int:
    """The pod's grace period: the drain's bound, then time for the engine's own shutdown."""
    return pool.drain.max_generation_seconds + SIGTERM_MARGIN_SECONDS


def worker_labels(*, pool: str, model: str, revision: str, zone: str) -> dict[str, str]:
    return {
        labels.ROLE: labels.ROLE_WORKER,
        labels.POOL: pool,
        labels.MODEL: model,
        labels.REVISION: revision,
        labels.ZONE: zone,
    }


def worker_deployment(
    *,
    namespace: str,
    pool_name: str,
    pool: InferencePoolSpec,
    model: ModelDeploymentSpec,
    owner: Owner,
    zone: str,
    replicas: int,
    pod_annotations: Mapping[str, str] | None = None,
    engine_key_fingerprint: str = "",
) -> Manifest:
    """The Deployment that runs ``replicas`` workers of ``model`` in one ``zone``;
    ``engine_key_fingerprint``: its engine and sidecar serve behind the pool's key
    (plan.isolation), whose fingerprint the pod template carries (a new key rolls the pods)."""
    revision = revision_of(model)
    pod_labels = worker_labels(pool=pool_name, model=model.model.name, revision=revision, zone=zone)
    accel = pool.accelerator
    selector = {pool.zones.topology_key: zone, **accel.node_selector}
    if accel.product:
        selector[labels.GPU_PRODUCT] = accel.product
    image = model.engine.image or DEFAULT_IMAGES[accel.kind]
    args, device_env, resources = device_parts(pool_name=pool_name, pool=pool, model=model)
    key_env = [isolation.key_env(pool_name)] if engine_key_fingerprint else []
    if engine_key_fingerprint:
        pod_annotations = {
            **(pod_annotations or {}),
            labels.ENGINE_KEY_FINGERPRINT: engine_key_fingerprint,
        }
    models = {"name": "models", "mountPath": "/models"}
    verifier = verify_step.container(
        image=image,
        env=artifact_env(model) + device_env,
        mounts=[models, *trust_mounts(model)],
        security=isolation.container_security(),
        engine_resources=resources,
    )
    container = {
        "name": "vllm",
        "image": image,
        "args": args,
        "ports": [{"name": "http", "containerPort": HTTP_PORT}],
        # serves what the verify step recorded, for this digest only (plan.verify_step)
        "env": artifact_env(model) + device_env + [verify_step.RECORD_ENV] + key_env,
        "securityContext": isolation.container_security(),
        # vLLM's own crashes fall back to logs (the verdict is the verify step's message).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": resources,
        "lifecycle": {"preStop": drain_hook(pool)},
        "volumeMounts": [
            models,
            *trust_mounts(model),
            {"name": "shm", "mountPath": "/dev/shm"},  # noqa: S108 - vLLM shm,
        ],
        **_probes(pool, model.model.name),
    }
    containers, volumes = (
        [container],
        [
            {"name": "models", "emptyDir": {}},
            *trust_volumes(model),
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    )
    if adapter_loader.serves_adapters(model):
        container["env"] = [*container["env"], adapter_loader.RUNTIME_LORA_ENV]
        sidecar = adapter_loader.container(model, image=image, engine_port=HTTP_PORT)
        sidecar["env"] = [*sidecar["env"], *key_env]
        sidecar["securityContext"] = isolation.container_security()
        containers.append(sidecar)
        volumes += adapter_loader.volumes(model)
    manifest: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": worker_name(pool_name, zone, revision),
            "namespace": namespace,
            "labels": pod_labels,
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": pod_labels},
            # Never dip below the desired count: a new pod first, then an old one goes.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {"labels": pod_labels, "annotations": dict(pod_annotations or {})},
                "spec": {
                    "nodeSelector": selector,
                    "tolerations": [t.to_wire() for t in accel.tolerations],
                    "terminationGracePeriodSeconds": grace_seconds(pool),
                    # A worker never calls the API server: no token to steal from it.
                    "automountServiceAccountToken": False,
                    "securityContext": isolation.pod_security(),
                    "initContainers": [verifier],
                    "containers": containers,
                    "volumes": volumes,
                },
            },
        },
    }
    return stamped(manifest)


def _pool_workers(pool_name: str) -> dict[str, str]:
    return {labels.POOL: pool_name, labels.ROLE: labels.ROLE_WORKER}


def _pool_child_metadata(namespace: str, pool_name: str, owner: Owner) -> dict[str, Any]:
    """PDB and Service share a name and belong to the pool (garbage-collected with it)."""
    return {
        "name": f"{pool_name}-workers",
        "namespace": namespace,
        "labels": {labels.POOL: pool_name},
        "ownerReferences": [owner.reference()],
    }


def disruption_budget(*, namespace: str, pool_name: str, owner: Owner) -> Manifest:
    """At most one worker of the pool voluntarily disrupted at a time (drains, upgrades)."""
    return stamped(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _pool_child_metadata(namespace, pool_name, owner),
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": _pool_workers(pool_name)},
            },
        }
    )


def headless_service(*, namespace: str, pool_name: str, owner: Owner) -> Manifest:
    """DNS names for the pool's workers (gateways discover them by watching pods)."""
    return stamped(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _pool_child_metadata(namespace, pool_name, owner),
            "spec": {
                "clusterIP": "None",
                "selector": _pool_workers(pool_name),
                "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": HTTP_PORT}],
                "publishNotReadyAddresses": False,
            },
        }
    )


def network_policy(
    *, namespace: str, pool_name: str, owner: Owner, peers: isolation.Peers
) -> Manifest:
    """Only the gateway (and scrapers, to /metrics) may open connections to the pool's workers."""
    return stamped(
        isolation.network_policy(
            metadata=_pool_child_metadata(namespace, pool_name, owner),
            workers=_pool_workers(pool_name),
            peers=peers,
            engine_port=HTTP_PORT,
            sidecar_port=adapter_loader.PORT,
        )
    )


def engine_key_secret(
    *, namespace: str, pool_name: str, owner: Owner, installation_key: str
) -> Manifest:
    """The key the pool's workers serve behind: its namespace's, derived from the
    installation's (tokenfleet.api.engine_key), never the installation's key itself."""
    metadata = _pool_child_metadata(namespace, pool_name, owner)
    key = engine_key.derive(installation_key, namespace)
    return stamped(isolation.key_secret(metadata=metadata, pool_name=pool_name, key=key))


def stamped(manifest: Manifest) -> Manifest:
    """``manifest`` with a hash of its content in an annotation (apply only on change)."""
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]
    meta = manifest["metadata"]
    return {
        **manifest,
        "metadata": {**meta, "annotations": {**meta.get("annotations", {}), APPLIED_HASH: digest}},
    }
