"""Attacks on a worker from inside the cluster and from a ModelDeployment's author (issue #35,
findings 1 and 5; docs/security.md lists each promise with its test here).

Matrix: a pool's rendered children (NetworkPolicy admits only the gateway and the scrapers,
the engine key Secret — its namespace's key, never the installation's, so one namespace's
engines refuse another's — the worker and sidecar containers serving behind it) × the worker pod's
privileges (user, capabilities, escalation, seccomp, token) × the readiness probe against an
engine that requires the key × the image policy (a spec naming an image without the verify-first
entrypoint is held, and Ready pods of such an image are never Verified) × the engine flags a
spec may not pass (each refused by pydantic and by the CRD's CEL rule, dash and underscore and
``=value`` spellings alike).
"""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tokenfleet.api import crd, engine_args, labels
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import (
    adapter_loader,
    canary,
    desired,
    devices,
    isolation,
    model_status,
    observed,
    pools,
)

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
ZONES = ("zone-a",)
POOL = InferencePoolSpec.model_validate(
    {"accelerator": {"product": "H100"}, "zones": {"names": list(ZONES)}, "replicas": {"min": 1}}
)
MODEL = ModelDeploymentSpec.model_validate(
    {
        "model": {"name": "m"},
        "pools": ["p"],
        "artifact": {
            "uri": "file:///m",
            "digest": "sha256:" + "c" * 64,
            "trust": {"publicKey": {"name": "k"}},
        },
    }
)
REVISION = desired.revision_of(MODEL)


def inputs(**overrides: Any) -> pools.PoolInputs:
    node = observed.NodeRecord(
        name="n",
        ready=True,
        allocatable={labels.GPU_RESOURCE: "8"},
        labels={labels.TOPOLOGY_ZONE: "zone-a", labels.GPU_PRODUCT: "H100"},
    )
    base: dict[str, Any] = dict(
        namespace="ns",
        name="p",
        uid="u1",
        generation=1,
        spec=POOL,
        status=None,
        model=MODEL,
        rival_models=[],
        pods=[],
        sets=[],
        nodes=[node],
        now=NOW,
    )
    return pools.PoolInputs(**{**base, **overrides})


def model_inputs(**overrides: Any) -> model_status.ModelInputs:
    base: dict[str, Any] = dict(
        namespace="ns",
        name="md",
        generation=1,
        spec=MODEL,
        status=None,
        existing_pools=frozenset({"p"}),
        pool_owner={"p": "md"},
        pods=[],
        now=NOW,
    )
    return model_status.ModelInputs(**{**base, **overrides})


KEY = "engine-key-0123456789abcdef"
PEERS = isolation.Peers(gateway_namespace="tokenfleet-system", scraper_namespaces=("monitoring",))
LORA_MODEL = ModelDeploymentSpec.model_validate(
    {**MODEL.model_dump(by_alias=True, exclude_none=True), "adapters": {}}
    | {"engine": {"lora": {"maxLoras": 2}}}
)


def applied(**overrides: Any) -> dict[str, list[dict[str, Any]]]:
    plan = pools.plan_pool(inputs(peers=PEERS, engine_key=KEY, **overrides))
    out: dict[str, list[dict[str, Any]]] = {}
    for manifest in plan.apply:
        out.setdefault(manifest["kind"], []).append(manifest)
    return out


def pod_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = applied(**overrides)["Deployment"][0]["spec"]["template"]["spec"]
    return spec


# --- finding 1: nothing but the gateway reaches a worker ---------------------------------------


def test_each_pool_admits_only_the_gateway_to_its_workers() -> None:
    (policy,) = applied()["NetworkPolicy"]
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {
        labels.POOL: "p",
        labels.ROLE: labels.ROLE_WORKER,
    }
    assert spec["policyTypes"] == ["Ingress"]
    gateway, scrapers = spec["ingress"]
    assert gateway["from"] == [
        {
            "namespaceSelector": {
                "matchLabels": {labels.NAMESPACE_NAME: "tokenfleet-system"},
            },
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "tokenfleet-gateway"}},
        }
    ]
    assert sorted(p["port"] for p in gateway["ports"]) == [
        desired.HTTP_PORT,
        adapter_loader.PORT,
    ]
    # Prometheus reads /metrics on the engine port, never the sidecar's, and only that port.
    assert scrapers == {
        "from": [{"namespaceSelector": {"matchLabels": {labels.NAMESPACE_NAME: "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": desired.HTTP_PORT}],
    }
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "InferencePool"


def test_the_engine_serves_behind_the_pool_key() -> None:
    children = applied(model=LORA_MODEL)
    (secret,) = children["Secret"]
    assert secret["metadata"]["name"] == "p-engine-key"
    assert secret["metadata"]["ownerReferences"][0]["name"] == "p"
    containers = {c["name"]: c for c in pod_spec(model=LORA_MODEL)["containers"]}
    want = {
        "name": "VLLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "p-engine-key", "key": "key"}},
    }
    for name in ("vllm", adapter_loader.CONTAINER):
        assert want in containers[name]["env"], name
        # never as an argument: arguments show in ps and in the Deployment's spec
        assert KEY not in str(containers[name].get("args", [])), name


def rendered_key(namespace: str) -> str:
    """The engine key the operator writes into a pool's Secret in ``namespace``."""
    (secret,) = applied(namespace=namespace)["Secret"]
    return base64.b64decode(secret["data"]["key"]).decode()


def _status(port: int, key: str) -> int:
    ask = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=b"{}",
        headers={"Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(ask, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_each_namespace_gets_its_own_engine_key(keyed_engine_of: Any) -> None:
    """One namespace's key never opens another's engines (issue 35, finding 1: every pool's
    Secret held the installation's key, so a namespace admin who read their copy could call
    every namespace's engines). Each Secret holds HMAC-SHA256(installation key, namespace),
    a valid bearer token, never the installation's key itself."""
    a, b = rendered_key("team-a"), rendered_key("team-b")
    assert a != b and KEY not in (a, b)
    assert rendered_key("team-a") == a  # stable: a re-render does not roll the workers' key
    for key in (a, b):
        assert re.fullmatch(r"[A-Za-z0-9._~+/-]+=*", key) and len(key) >= 43  # RFC 6750 token
    port = keyed_engine_of(a)  # an engine of team-a, serving behind its pool's Secret
    assert _status(port, a) == 200
    assert _status(port, b) == 401  # team-b's admin, with the key their own Secret holds


@pytest.mark.parametrize(
    ("before", "after", "rolls"),
    [
        pytest.param(("ns", KEY), ("ns", KEY), False, id="same-key-same-pods"),
        pytest.param(("ns", KEY), ("ns", KEY + "-rotated"), True, id="rotated-key-rolls"),
        pytest.param(("ns", KEY), ("other", KEY), True, id="another-namespaces-key-differs"),
    ],
)
def test_a_new_engine_key_rolls_the_workers(
    before: tuple[str, str], after: tuple[str, str], rolls: bool
) -> None:
    """A pod reads VLLM_API_KEY from its Secret once, at start: a pod started before the key
    changed (the upgrade to per-namespace keys, a rotation) would refuse the gateway until
    replaced. The key's fingerprint is on the pod template, so a new key rolls the workers
    (maxUnavailable 0); the key itself never is."""

    def template(namespace: str, key: str) -> dict[str, Any]:
        plan = pools.plan_pool(inputs(namespace=namespace, peers=PEERS, engine_key=key))
        (deployment,) = [m for m in plan.apply if m["kind"] == "Deployment"]
        annotations: dict[str, Any] = deployment["spec"]["template"]["metadata"]["annotations"]
        assert after[1] not in str(annotations) and before[1] not in str(annotations)
        return annotations

    old, new = template(*before), template(*after)
    assert labels.ENGINE_KEY_FINGERPRINT in old
    assert (old != new) is rolls


class _KeyedEngine(http.server.BaseHTTPRequestHandler):
    """vLLM with --api-key: /v1 needs the Bearer key, /metrics does not."""

    key = KEY

    def do_GET(self) -> None:
        self._answer(200, b"")  # /metrics, empty: an idle engine

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        good = self.headers.get("Authorization") == f"Bearer {self.key}"
        self._answer(200 if good else 401, b"{}")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def keyed_engine_of() -> Iterator[Any]:
    """Start an engine serving behind a given key; its port."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(key: str) -> int:
        handler = type("Engine", (_KeyedEngine,), {"key": key})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()


@pytest.fixture
def keyed_engine(keyed_engine_of: Any) -> int:
    """An engine serving behind the key the operator renders for namespace ns."""
    return int(keyed_engine_of(rendered_key("ns")))


@pytest.mark.parametrize(
    ("env", "ready"),
    [
        pytest.param({"VLLM_API_KEY": "<the pool's>"}, True, id="with-the-pod-key"),
        pytest.param({}, False, id="without-a-key"),
    ],
)
def test_the_readiness_probe_sends_the_engine_key(
    keyed_engine: int, env: dict[str, str], ready: bool
) -> None:
    probe = pod_spec()["containers"][0]["readinessProbe"]["exec"]["command"]
    script = probe[2].replace(f"127.0.0.1:{desired.HTTP_PORT}", f"127.0.0.1:{keyed_engine}")
    clean = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    env = {k: rendered_key("ns") for k in env}  # what the pool's Secret holds
    done = subprocess.run(
        [sys.executable, "-c", script, probe[3]], env={**clean, **env}, timeout=30, check=False
    )
    assert (done.returncode == 0) is ready


# --- finding 5: the worker holds no more privilege than serving needs --------------------------


def test_worker_pods_run_unprivileged_without_a_token() -> None:
    spec = pod_spec(model=LORA_MODEL)
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["runAsNonRoot"] is True, container["name"]


# --- finding 5: an image without the verify-first entrypoint never serves, never Verified ------

ALLOWED = ("ghcr.io/tokenfleet/worker", "localhost/tokenfleet-worker-sim")


def with_image(image: str) -> ModelDeploymentSpec:
    return MODEL.model_copy(update={"engine": MODEL.engine.model_copy(update={"image": image})})


@pytest.mark.parametrize(
    ("image", "held"),
    [
        pytest.param(None, False, id="default-image"),
        pytest.param("ghcr.io/tokenfleet/worker:vllm-v0.34.0", False, id="own-repository"),
        pytest.param("localhost/tokenfleet-worker-sim:abc@sha256:" + "1" * 64, False, id="digest"),
        pytest.param("vllm/vllm-openai:v0.33.0", True, id="plain-vllm"),
        pytest.param("ghcr.io/tokenfleet/worker-evil:vllm-v0.33.0", True, id="lookalike"),
        pytest.param("evil.io/ghcr.io/tokenfleet/worker:x", True, id="nested-lookalike"),
    ],
)
def test_images_outside_the_policy_are_held(image: str | None, held: bool) -> None:
    fit = devices.fit(
        with_image(image) if image else MODEL, pools={"p": POOL}, allowed_images=ALLOWED
    )
    assert (fit.misfit is not None and fit.misfit.reason == "ImageNotAllowed") is held


DIGEST = MODEL.artifact.digest
SIGNER = "key:sha256:" + "d" * 64


def _verdict(**overrides: Any) -> str:
    body = {"reason": "Verified", "digest": DIGEST, "signer": SIGNER, "message": ""}
    return json.dumps({**body, **overrides})


def _pod(
    name: str = "w",
    *,
    image: str = "ghcr.io/tokenfleet/worker:vllm-v0.33.0",
    verdict: str | None = None,
    where: str = "verify",
    ready: bool = True,
) -> observed.WorkerPod:
    """A worker pod as the API server shows it: the verdict, when any, as the kubelet records
    it — the termination message of the container ``where`` (the verify init container, or the
    engine's) — never anything the pod's author could write into metadata."""
    terminated = {"state": {"terminated": {"exitCode": 0, "message": verdict}}}
    statuses = [{"name": where, **terminated}] if verdict is not None else []
    kind = "initContainerStatuses" if where == "verify" else "containerStatuses"
    pod = {
        "metadata": {
            "name": name,
            "labels": {labels.REVISION: REVISION, labels.ZONE: "zone-a"},
            # what the local node agent writes for kubectl users: never read as a verdict
            "annotations": {labels.VERDICT: _verdict()},
        },
        "spec": {"containers": [{"name": "vllm", "image": image}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            kind: statuses,
        },
    }
    return observed.worker_pod(pod)


@pytest.mark.parametrize(
    ("pods", "verified", "reason"),
    [
        pytest.param([_pod(verdict=_verdict())], True, "Verified", id="verify-step-passed"),
        pytest.param(
            [_pod(image="vllm/vllm-openai:v0.33.0")], False, "NoVerdict", id="no-entrypoint"
        ),
        pytest.param([_pod()], False, "NoVerdict", id="allowed-image-ready-without-verdict"),
        pytest.param(
            [_pod(image="vllm/vllm-openai:v0.33.0", verdict=_verdict())],
            False,
            "NoVerdict",
            id="a-verdict-under-an-image-outside-the-policy",
        ),
        pytest.param(
            [_pod(verdict=_verdict(digest="sha256:" + "e" * 64))],
            False,
            "VerdictMismatch",
            id="verdict-for-another-digest",
        ),
        pytest.param(
            [_pod("a", verdict=_verdict()), _pod("b")],
            False,
            "NoVerdict",
            id="one-of-two-without-verdict",
        ),
        pytest.param(
            [_pod(verdict=_verdict(), where="vllm")],
            False,
            "NoVerdict",
            id="a-pass-in-the-engine-containers-message",
        ),
    ],
)
def test_verified_needs_an_image_that_verifies(
    pods: list[observed.WorkerPod], verified: bool, reason: str
) -> None:
    """Ready is not a verdict: each Ready worker of the revision needs its own recorded pass
    for the revision's digest (plan.attestation), and the condition says what is missing."""
    status, _ = model_status.plan_model(model_inputs(pods=pods, allowed_images=ALLOWED))
    condition = next(c for c in status.conditions if c.type == "Verified")
    assert (condition.status, condition.reason) == ("True" if verified else "False", reason)
    entry = next(r for r in status.revisions if r.name == REVISION)
    assert entry.verified is verified
    if verified:
        assert SIGNER in condition.message
    else:  # names the pods and the fix
        assert "w" in condition.message or "b" in condition.message
        assert "delete" in condition.message


def test_a_ready_worker_without_a_verdict_does_not_pass_the_rollout_gate() -> None:
    """The canary gate (plan.canary.verification) takes only a recorded pass, for the digest."""
    assert canary.verification([_pod()], REVISION, digest=DIGEST) is None
    foreign = _pod(verdict=_verdict(digest="sha256:" + "e" * 64))
    assert canary.verification([foreign], REVISION, digest=DIGEST) is None
    passed = canary.verification([_pod(verdict=_verdict())], REVISION, digest=DIGEST)
    assert passed is not None and passed.outcome.value == "Verified"


# --- finding 5: extraArgs cannot widen the engine's reach --------------------------------------

REFUSED_SPELLINGS = [
    ["--allowed-local-media-path", "/"],
    ["--allowed_local_media_path=/"],
    ["--host", "0.0.0.0"],
    ["--api-key=mine"],
    ["--enable-lora-bias"],
    ["--lora-modules", "x=/tmp/x"],
    ["--middleware", "evil.Middleware"],
    ["--Enable-Log-Requests"],
]


@pytest.mark.parametrize("args", REFUSED_SPELLINGS, ids=lambda a: a[0].lstrip("-"))
def test_extra_args_that_widen_reach_are_refused(args: list[str]) -> None:
    body = MODEL.model_dump(by_alias=True, exclude_none=True)
    body["engine"]["extraArgs"] = ["--seed", "1", *args]
    with pytest.raises(ValidationError, match="extraArgs may not set"):
        ModelDeploymentSpec.model_validate(body)


def test_the_crd_carries_the_same_refusal() -> None:
    rendered = yaml.safe_load(crd.render_files()["tokenfleet.io_modeldeployments.yaml"])
    schema = rendered["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    extra = schema["properties"]["spec"]["properties"]["engine"]["properties"]["extraArgs"]
    (rule,) = extra["items"]["x-kubernetes-validations"]
    assert rule["rule"] == f"!{engine_args.cel_refused('self')}"
    assert rule["reason"] == "FieldValueForbidden"
    assert extra["maxItems"] == 64  # CEL's cost estimate needs bounded lists and strings
    assert extra["items"]["maxLength"] == 1024


@pytest.mark.parametrize(
    "args",
    [["--seed", "1"], ["--hostname-like-but-not"], ["--enable-lora"], ["--max-logprobs=5"]],
    ids=lambda a: a[0].lstrip("-"),
)
def test_ordinary_extra_args_pass(args: list[str]) -> None:
    body = MODEL.model_dump(by_alias=True, exclude_none=True)
    body["engine"]["extraArgs"] = args
    assert ModelDeploymentSpec.model_validate(body).engine.extra_args == args
