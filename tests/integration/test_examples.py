"""Every example under examples/, as its README tells it, against the real local control plane.

One test per folder: its YAML applies (the API server's CEL and schema accept it), the operator
brings it to the state its README documents, and the README's commands run. 02 reaches
Verified=True from the local platform's real verification of its shipped artifact, and the same
manifest pointed at a tampered or absent copy never serves and says why. 04's full journey
(sign, serve, tamper, refuse) is tests/integration/test_signed_example.py; here its README's
signing steps run and print the digest the manifest pins. 05 and 06 are offline tools: a short
simulation of each scenario's first seconds, and `tokenfleet plan` printing exactly the output
06's README shows. 09 (model routes) is applied and reported by the operator as its README
says, and its classifier's training command reproduces the shipped weights. 10 (a CPU pool
of real vLLM) is accepted and reported as it is on a cluster without CPU nodes; its real journey is
tests/e2e/test_real_engine_on_make_up.py.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cluster import BIN_DIR, Cluster, wait_for
from tokenfleet.api import labels
from tokenfleet.signing import verdict

BIN = Path(sys.executable).parent
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run a README command from the repository root; fail with its output unless it exits 0."""
    done = subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        env=env,
        cwd=EXAMPLES.parent,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


def apply(cluster: Cluster, ns: str, *folders: str) -> None:
    for folder in folders:
        cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / folder))


def test_every_example_is_tested_here() -> None:
    folders = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
    tested = sorted(m[1] for name in globals() if (m := re.match(r"test_(\d\d)_", name)))
    assert [f[:2] for f in folders] == tested, (folders, tested)
    readme = (EXAMPLES / "README.md").read_text()
    assert all(f"`{f}`" in readme for f in folders), "examples/README.md lists every folder"


def monday_launch_active(now: datetime.datetime) -> bool:
    """01's schedule: Mondays 08:00-12:00 UTC raise the pool's floor to 12."""
    return now.weekday() == 0 and 8 <= now.hour < 12


def placed(cluster: Cluster, ns: str, want: int) -> dict[str, Any] | None:
    """chat-h100's status once ``want`` replicas are Ready, evenly over its three zones."""
    status = cluster.get("tfpool", "chat-h100", "-n", ns).get("status") or {}
    zones = {z["name"]: (z.get("desired", 0), z.get("ready", 0)) for z in status.get("zones", [])}
    even = all(zones.get(z) == (want // 3, want // 3) for z in ("zone-a", "zone-b", "zone-c"))
    return status if status.get("readyReplicas") == want and even else None


def expected_replicas() -> int:
    """01's floor (6, or 12 during its Monday schedule) with the headroom that survives losing
    one of three zones: half as much again."""
    floor = 12 if monday_launch_active(datetime.datetime.now(datetime.UTC)) else 6
    return floor * 3 // 2


def test_01_three_zone_pool(cluster: Cluster, ns: str, operator: Any) -> None:
    apply(cluster, ns, "01-three-zone-pool")
    want = expected_replicas()

    def sized() -> dict[str, Any] | None:
        status = cluster.get("tfpool", "chat-h100", "-n", ns).get("status") or {}
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
        return status if status.get("replicas") == want and ready.get("reason") else None

    # Capacity alone: sized (nine replicas: six that survive a zone loss), but no workers run
    # until a model is deployed on the pool (example 02), and Ready says so.
    status = wait_for(f"{want} replicas planned", sized, timeout=120)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoModelDeployment"), ready
    columns = cluster.kubectl("get", "tfpool", "chat-h100", "-n", ns).stdout
    assert "chat-h100" in columns and "NVIDIA-H100-80GB-HBM3" in columns, columns
    filled = yaml.safe_load(
        cluster.kubectl("get", "tfpool", "chat-h100", "-n", ns, "-o", "yaml").stdout
    )
    classes = [c["name"] for c in filled["spec"]["admission"]["classes"]]
    assert classes == ["critical", "interactive", "batch"]  # the schema's defaults
    explained = cluster.kubectl("explain", "inferencepool.spec.zones").stdout
    assert "tolerateLoss" in explained
    # "Try an invalid change and read the message, for example replicas.min: 30"
    refused = cluster.kubectl(
        "patch", "tfpool", "chat-h100", "-n", ns, "--type", "merge",
        "-p", '{"spec":{"replicas":{"min":30}}}', check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "replicas.min" in refused.stderr, refused.stderr


#: Where 02's manifest reads its artifact from; its README copies tiny-chat/ there.
ARTIFACT_02 = Path("/tmp/tokenfleet-examples/02-model-deployment/tiny-chat")


def copy_artifact_02() -> None:
    """The README's ``mkdir -p`` + ``cp -r``: the shipped files where the manifest points."""
    shutil.copytree(EXAMPLES / "02-model-deployment/tiny-chat", ARTIFACT_02, dirs_exist_ok=True)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def test_02_model_deployment(cluster: Cluster, ns: str, operator: Any) -> None:
    copy_artifact_02()
    apply(cluster, ns, "01-three-zone-pool", "02-model-deployment")
    manifest = yaml.safe_load((EXAMPLES / "02-model-deployment/modeldeployment.yaml").read_text())
    assert manifest["spec"]["artifact"]["uri"] == ARTIFACT_02.as_uri()
    assert "fallback" not in manifest["spec"]  # no example deploys a model to fall back to

    # "runs llama-3.1-8b-instruct on the pool of example 01": nine workers, three per zone,
    # each started only after the node agent verified the shipped artifact
    want = expected_replicas()
    wait_for(
        f"{want} Ready workers, even over 3 zones", lambda: placed(cluster, ns, want), timeout=240
    )
    public = (EXAMPLES / "02-model-deployment/public.pem").read_bytes()
    signer = "key:sha256:" + hashlib.sha256(public).hexdigest()

    def verified() -> dict[str, Any] | None:
        obj = cluster.get("tfmodel", "llama-chat", "-n", ns)
        return obj if condition(obj, "Verified").get("status") == "True" else None

    obj = wait_for("llama-chat Verified", verified, timeout=120)
    assert condition(obj, "Verified")["message"].endswith(f"signed by {signer}"), obj["status"]
    assert condition(obj, "Available")["status"] == "True", obj["status"]
    (entry,) = obj["status"]["revisions"]
    assert (entry["verified"], entry["signer"], entry["digest"]) == (
        True,
        signer,
        manifest["spec"]["artifact"]["digest"],
    )
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}=llama-3.1-8b-instruct")["items"]
    assert len(pods) == want
    for pod in pods:  # the verdict of the verification each engine waited for
        seen = verdict.parse(pod["metadata"]["annotations"][labels.VERDICT])
        assert seen is not None and seen.verified and seen.signer == signer, pod["metadata"]
    listed = cluster.kubectl("get", "tfmodel", "llama-chat", "-n", ns).stdout
    assert "llama-chat" in listed and "llama-3.1-8b-instruct" in listed, listed
    explained = cluster.kubectl("explain", "modeldeployment.spec.rollout.analysis").stdout
    assert "maxTtftP99Ratio" in explained
    # the README's own check of the artifact, as the worker runs it
    py = sys.executable
    checked = run(
        py, "-m", "tokenfleet.signing", "verify", ARTIFACT_02.as_uri(),
        "--digest", entry["digest"], "--public-key", "examples/02-model-deployment/public.pem",
    )  # fmt: skip
    assert '"reason":"Verified"' in checked and signer in checked, checked
    readme = (EXAMPLES / "02-model-deployment/README.md").read_text()
    assert entry["digest"] in readme and ARTIFACT_02.as_uri() in readme


@pytest.mark.parametrize(
    ("damage", "reason"),
    [("tampered", "DigestMismatch"), ("absent", "ArtifactUnreachable")],
)
def test_example_02_from_a_tampered_or_absent_artifact_never_serves(
    cluster: Cluster, ns: str, operator: Any, tmp_path: Path, damage: str, reason: str
) -> None:
    """The same manifest pointed at a changed or missing copy: every worker refused with the
    verifier's reason, none Ready or listening, and Verified=False says why."""
    copy = tmp_path / "tiny-chat"
    if damage == "tampered":
        shutil.copytree(EXAMPLES / "02-model-deployment/tiny-chat", copy)
        (copy / "config.json").write_text('{"architectures": ["SomethingElse"]}')
    manifest = yaml.safe_load((EXAMPLES / "02-model-deployment/modeldeployment.yaml").read_text())
    manifest["spec"]["artifact"]["uri"] = copy.as_uri()
    manifest["metadata"]["namespace"] = ns
    apply(cluster, ns, "01-three-zone-pool")
    cluster.kubectl(
        "apply", "-n", ns, "-f", str(EXAMPLES / "02-model-deployment/trust-secret.yaml")
    )
    cluster.apply(manifest)

    def refused() -> dict[str, Any] | None:
        obj = cluster.get("tfmodel", "llama-chat", "-n", ns)
        found = condition(obj, "Verified")
        return obj if found.get("status") == "False" and found.get("reason") == reason else None

    obj = wait_for(f"Verified=False ({reason})", refused, timeout=180)
    assert reason in condition(obj, "Verified")["message"], obj["status"]
    assert condition(obj, "Available")["status"] == "False", obj["status"]
    assert all(
        not r.get("verified") and r["readyReplicas"] == 0 for r in obj["status"]["revisions"]
    )
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}=llama-3.1-8b-instruct")["items"]
    assert pods
    for pod in pods:
        seen = verdict.parse((pod["metadata"].get("annotations") or {}).get(labels.VERDICT, ""))
        if seen is None:
            continue  # not verified yet: it has no engine either
        assert seen.reason == reason, seen
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False", pod["status"]
        if pod["status"].get("podIP"):  # no engine behind a refused pod's address
            with socket.socket() as probe:
                probe.settimeout(1)
                assert probe.connect_ex((pod["status"]["podIP"], 8000)) != 0


def test_03_two_tenants(cluster: Cluster, ns: str, operator: Any) -> None:
    apply(cluster, ns, "03-two-tenants")
    listed = cluster.kubectl("get", "tftenant", "-n", ns).stdout
    assert "search-team" in listed and "nightly-evals" in listed, listed
    key = run(
        str(BIN / "tokenfleet"), "tenant", "create-key", "search-team", "-n", ns, env=cluster.env
    ).strip()
    assert re.fullmatch(r"\S{20,}", key), key  # printed once
    secret = cluster.get("secret", "search-team-keys", "-n", ns)
    assert key not in yaml.safe_dump(secret)  # only its hash is stored

    def one_key() -> int | None:
        status = cluster.get("tftenant", "search-team", "-n", ns).get("status") or {}
        return 1 if status.get("keyCount") == 1 else None

    wait_for("search-team sees its key", one_key, timeout=60)


def test_04_signed_artifact(tmp_path: Path) -> None:
    """The README's steps 1-3 (keygen, sign, verify) print the digest the manifest pins."""
    py = sys.executable
    model = tmp_path / "tiny-model"
    shutil.copytree(EXAMPLES / "04-signed-artifact/tiny-model", model)
    run(py, "-m", "tokenfleet.signing", "keygen", str(tmp_path / "keys"))
    signed = run(
        py, "-m", "tokenfleet.signing", "sign", str(model),
        "--private-key", str(tmp_path / "keys/private.pem"),
    )  # fmt: skip
    pinned = yaml.safe_load((EXAMPLES / "04-signed-artifact/modeldeployment.yaml").read_text())
    digest = pinned["spec"]["artifact"]["digest"]
    assert digest in signed, signed
    assert digest in (EXAMPLES / "04-signed-artifact/README.md").read_text()
    verified = run(
        py, "-m", "tokenfleet.signing", "verify", model.as_uri(), "--digest", digest,
        "--public-key", str(tmp_path / "keys/public.pem"),
    )  # fmt: skip
    assert '"reason":"Verified"' in verified.replace(" ", ""), verified


@pytest.mark.parametrize(
    "scenario", sorted((EXAMPLES / "05-simulations").glob("*.yaml")), ids=lambda p: p.stem
)
def test_05_simulations(scenario: Path, tmp_path: Path) -> None:
    """`tokenfleet simulate` on each scenario, its first 10 s under TokenFleet's policy."""
    out = run(
        str(BIN / "tokenfleet"), "simulate", str(scenario), "--scaler", "tokenfleet",
        "--duration", "10", "--quiet", "--out", str(tmp_path),
    )  # fmt: skip
    assert "tokenfleet" in out and (tmp_path / "results.json").exists(), out


def readme_block(readme: str, after: str) -> str:
    """The first fenced block after the line containing ``after``."""
    rest = readme[readme.index(after) :]
    return rest.split("```", 2)[1].split("\n", 1)[1]


def test_06_capacity_plan() -> None:
    folder = EXAMPLES / "06-capacity-plan"
    readme = (folder / "README.md").read_text()
    command = readme_block(readme, "## Plan").strip()
    assert command.startswith("tokenfleet plan "), command
    out = run(str(BIN / "tokenfleet"), *command.split()[1:])
    assert "sustained 10,000 req/s:" in out and "peak 15,000 req/s:" in out, out
    assert "per hour" in out and "per successful request" in out, out
    shown = readme_block(readme, "It prints:")
    assert out == shown, "06's README shows stale output: paste the new one"


def readme_setup(readme: str) -> str:
    """The README's first shell block up to its traffic loop, as a script: the setup a user
    runs on the platform `make up` leaves (their own KUBECONFIG export left out)."""
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    setup = block.split("\n# traffic", 1)[0]
    return "\n".join(line for line in setup.splitlines() if not line.startswith("export "))


def test_07_quality_canary(cluster: Cluster, ns: str, operator: Any, tmp_path: Path) -> None:
    """The README's setup, run as written on what `make up` leaves (example 02's trust Secret
    applied, its artifact placed): no step conflicts with it, and the stable revision is
    promoted, verified by example 02's key. Every object of the example is accepted by the API
    server (its CEL validation). The rollout journey itself — the quantized canary rolled back
    with QualityRegression, the good one promoted — runs in
    tests/integration/test_quality_gate.py."""
    folder = EXAMPLES / "07-quality-canary"
    # canary-*.yaml are the patches the README applies to the ModelDeployment, not objects.
    objects_ = [m for m in sorted(folder.glob("*.yaml")) if "\nkind:" in "\n" + m.read_text()]
    assert len(objects_) >= 3, objects_
    for manifest in objects_:
        done = cluster.kubectl(
            "apply", "--dry-run=server", "-n", ns, "-f", str(manifest), check=False
        )
        assert done.returncode == 0, (manifest.name, done.stderr)
    readme = (folder / "README.md").read_text()
    assert "kubectl tokenfleet rollout" in readme and "QualityRegression" in readme

    # Example 02's artifact and trust, pinned as 02 pins them (02's make-artifact.sh re-signs).
    pinned = yaml.safe_load((folder / "modeldeployment.yaml").read_text())["spec"]["artifact"]
    of_02 = yaml.safe_load((EXAMPLES / "02-model-deployment/modeldeployment.yaml").read_text())
    assert pinned == of_02["spec"]["artifact"], pinned

    # What `make up` leaves: example 02's artifact placed and its trust Secret applied.
    copy_artifact_02()
    cluster.kubectl(
        "apply", "-n", ns, "-f", str(EXAMPLES / "02-model-deployment/trust-secret.yaml")
    )
    # The user's kubectl, its context in this test's namespace (make up's is "default").
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(cluster.kubeconfig, kubeconfig)
    env = {
        **cluster.env,
        "KUBECONFIG": str(kubeconfig),
        "PATH": os.pathsep.join((str(BIN_DIR), str(BIN), cluster.env.get("PATH", ""))),
    }
    run("kubectl", "config", "set-context", "--current", "--namespace", ns, env=env)
    run("bash", "-euo", "pipefail", "-c", readme_setup(readme), env=env)

    def promoted() -> dict[str, Any] | None:
        obj = cluster.get("tfmodel", "support-bot", "-n", ns)
        rollout = (obj.get("status") or {}).get("rollout") or {}
        verified = condition(obj, "Verified").get("status") == "True"
        return obj if rollout.get("phase") == "Promoted" and verified else None

    obj = wait_for("support-bot's first revision promoted", promoted, timeout=180)
    public = (EXAMPLES / "02-model-deployment/public.pem").read_bytes()
    assert obj["status"]["revisions"][0]["signer"] == (
        "key:sha256:" + hashlib.sha256(public).hexdigest()
    )
    shown = run("kubectl", "tokenfleet", "rollout", "status", "support-bot", env=env)
    assert "Promoted" in shown, shown


#: Where 08's manifests read their files from; its README copies them there.
ARTIFACTS_08 = Path("/tmp/tokenfleet-examples/08-lora-adapters")


def test_08_lora_adapters(cluster: Cluster, ns: str, operator: Any, tmp_path: Path) -> None:
    """The README's journey: both adapters verified by the operator, each tenant's served from
    its adapter through the base's workers (their real adapter-loader sidecars), the other
    tenant refused with 403, status showing where it is loaded and what it served; and the
    shipped files are what make-adapters.py writes, signed as adapters.yaml pins them."""
    import openai

    from support.cluster import scraped
    from support.gateway import running, start_gateway
    from support.operator import service_account_kubeconfig

    folder = EXAMPLES / "08-lora-adapters"
    remade = tmp_path / "remade"
    remade.mkdir()
    run(sys.executable, str(folder / "make-adapters.py"), str(remade))
    pinned = {
        doc["metadata"]["name"]: doc["spec"]["artifact"]
        for doc in yaml.safe_load_all((folder / "adapters.yaml").read_text())
    }
    for name, spec in pinned.items():
        for file in ("adapter_config.json", "adapter_model.safetensors"):
            assert (remade / name / file).read_bytes() == (folder / name / file).read_bytes()
        assert spec["uri"] == (ARTIFACTS_08 / name).as_uri()
        checked = run(
            sys.executable, "-m", "tokenfleet.signing", "verify", (folder / name).as_uri(),
            "--digest", spec["digest"], "--public-key", str(folder / "public.pem"),
        )  # fmt: skip
        assert json.loads(checked)["reason"] == "Verified", checked

    # the README: copy the files where the manifests point, apply, make the tenants' keys
    ARTIFACTS_08.mkdir(parents=True, exist_ok=True)
    for name in ("acme-support", "globex-legal"):
        shutil.copytree(folder / name, ARTIFACTS_08 / name, dirs_exist_ok=True)
    shutil.copytree(
        EXAMPLES / "02-model-deployment/tiny-chat", ARTIFACTS_08 / "tiny-chat", dirs_exist_ok=True
    )
    cluster.kubectl(
        "apply", "-n", ns, "-f", str(EXAMPLES / "02-model-deployment/trust-secret.yaml")
    )
    apply(cluster, ns, "08-lora-adapters")
    keys = {
        tenant: run(
            str(BIN / "tokenfleet"), "tenant", "create-key", tenant, "-n", ns, env=cluster.env
        ).strip()
        for tenant in ("acme", "globex")
    }

    def ready(name: str) -> dict[str, Any] | None:
        obj = cluster.get("tfadapter", name, "-n", ns)
        return obj if condition(obj, "Ready").get("status") == "True" else None

    for name in pinned:
        obj = wait_for(f"{name} verified and Ready", lambda n=name: ready(n), timeout=120)
        assert obj["status"]["verified"] and obj["status"]["digest"] == pinned[name]["digest"]
    table = cluster.kubectl("get", "tfadapter", "-n", ns).stdout
    assert "acme-support" in table and "Verified" in table, table

    kubeconfig = service_account_kubeconfig(
        cluster, tmp_path / "gw-kubeconfig", component="gateway", account="tokenfleet-gateway"
    )
    gateway = start_gateway(tmp_path, None, env={"KUBECONFIG": str(kubeconfig)}, ready=False)
    with running(gateway), scraped(cluster, job="tokenfleet-gateway", port=gateway.port):
        clients = {
            t: openai.OpenAI(base_url=gateway.url + "/v1", api_key=k, max_retries=0)
            for t, k in keys.items()
        }

        def answer(tenant: str, model: str) -> Any:
            try:
                return clients[tenant].chat.completions.with_raw_response.create(
                    model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=8
                )
            except (openai.AuthenticationError, openai.NotFoundError, openai.APIStatusError):
                return None  # keys, pods or verdicts not known to the new gateway yet

        for tenant, model in (("acme", "acme-support"), ("globex", "globex-legal")):
            raw = wait_for(f"{tenant} served by {model}", lambda t=tenant, m=model: answer(t, m),
                           timeout=120)  # fmt: skip
            assert raw.headers["X-TokenFleet-Model"] == model
            assert raw.parse().model == model and raw.parse().choices
        with pytest.raises(openai.PermissionDeniedError):
            clients["globex"].chat.completions.create(
                model="acme-support", messages=[{"role": "user", "content": "hi"}], max_tokens=8
            )
        base = clients["acme"].chat.completions.create(
            model="llama-3.1-8b-base", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert base.model == "llama-3.1-8b-base"
        pods = {p["metadata"]["name"] for p in cluster.get("pods", "-n", ns)["items"]}

        def reported() -> dict[str, Any] | None:
            status = cluster.get("tfadapter", "acme-support", "-n", ns).get("status") or {}
            served = status.get("requestsServed", 0) >= 1
            return status if served and status.get("loadedReplicas", 0) >= 1 else None

        status = wait_for("acme-support's placement in status", reported, timeout=90)
        assert set(status["loadedOn"]) <= pods and status["loadedReplicas"] == len(
            status["loadedOn"]
        )


TRAIN = (
    "tokenfleet route train-classifier examples/09-model-routes/prompts.jsonl "
    "-o examples/09-model-routes/classifier-configmap.yaml --configmap chat-auto-classifier"
)


def test_09_model_routes(cluster: Cluster, ns: str, tmp_path: Path, operator: Any) -> None:
    """The README's steps as far as this cluster goes: the chat-auto route and its classifier's
    ConfigMap applied (the ConfigMap carries the label the gateways watch), the route's Ready
    False TargetNotFound naming chat-large and chat-small while no ModelDeployment serves them
    (the README's first observation; serving the route is
    tests/integration/test_gateway_model_routes.py and test_gateway_kubernetes.py); its
    RemotesReady False KeySecretNotFound, since this cluster has no region-b-key; and the
    README's training command, run on the shipped prompts, prints the held-out line the shipped
    weights record and writes exactly the shipped ConfigMap."""
    folder = EXAMPLES / "09-model-routes"
    for manifest in sorted(folder.glob("*.yaml")):
        cluster.kubectl("apply", "-n", ns, "-f", str(manifest))
    readme = (folder / "README.md").read_text()
    assert TRAIN in readme, "the README shows the training command this test runs"
    assert "TargetNotFound" in readme and "X-TokenFleet-Route" in readme
    cm = cluster.get("configmap", "chat-auto-classifier", "-n", ns)
    assert cm["metadata"]["labels"][labels.ROUTE_CLASSIFIER] == "true"

    def ready(kind: str = "Ready") -> dict[str, Any]:
        status = cluster.get("tfroute", "chat-auto", "-n", ns).get("status", {})
        return next((c for c in status.get("conditions", []) if c["type"] == kind), {})

    cond = wait_for("chat-auto reported", lambda: (c := ready()).get("reason") and c, timeout=60)
    assert (cond["status"], cond["reason"]) == ("False", "TargetNotFound")
    assert "chat-large, chat-small" in cond["message"]
    assert "RemotesReady" in readme and "gateway.remoteKeySecrets" in readme
    remotes = ready("RemotesReady")
    assert (remotes["status"], remotes["reason"]) == ("False", "KeySecretNotFound")
    assert "remote region-b: Secret tokenfleet-system/region-b-key" in remotes["message"]
    out = tmp_path / "classifier-configmap.yaml"
    args = TRAIN.split()[1:]
    args[args.index("-o") + 1] = str(out)
    printed = run(str(BIN / "tokenfleet"), *args)
    shipped = (folder / "classifier-configmap.yaml").read_text()
    recorded = json.loads(yaml.safe_load(shipped)["data"]["weights.json"])["about"]["heldOut"]
    assert recorded in printed.splitlines(), (recorded, printed)
    assert out.read_text() == shipped


def test_10_cpu_pool(cluster: Cluster, ns: str, operator: Any) -> None:
    """The API half of the README (its full journey — real vLLM pods on the real node, chat
    through the chart's gateway, a scale-in under streams — is
    tests/e2e/test_real_engine_on_make_up.py on `TOKENFLEET_ENGINE=vllm-cpu make up`): the
    API server accepts both manifests as shipped; the ModelDeployment says how the operator
    renders its CPU replicas (the CPU image, the KV cache sized from the memory, one compute
    thread); and on a cluster with no CPU node in zone-real (this one's nodes are simulated
    GPUs) the pool says so rather than pretending to place replicas."""
    folder = EXAMPLES / "10-cpu-pool"
    for manifest in ("inferencepool.yaml", "modeldeployment.yaml"):
        cluster.kubectl("apply", "-n", ns, "-f", str(folder / manifest))

    def compatible() -> dict[str, Any] | None:
        obj = cluster.get("tfmodel", "tiny-llama", "-n", ns)
        return obj if condition(obj, "Compatible").get("status") == "True" else None

    model = wait_for("tiny-llama Compatible", compatible, timeout=60)
    message = condition(model, "Compatible")["message"]
    assert "image ghcr.io/tokenfleet/worker:vllm-cpu-v0.32.0" in message, message
    assert "500m CPU and 5Gi per replica: KV cache 1 GiB" in message, message
    assert "1 compute thread" in message, message
    assert condition(model, "Verified")["status"] == "False", model["status"]  # nothing served

    def explained() -> dict[str, Any] | None:
        obj = cluster.get("tfpool", "cpu-pool", "-n", ns)
        return obj if condition(obj, "Ready").get("reason") == "NoHealthyZone" else None

    pool = wait_for("cpu-pool saying why it has no replica", explained, timeout=60)
    assert "zone-real lost: no node offers the accelerator" in condition(pool, "Ready")["message"]
    assert pool["status"]["replicas"] == 0, pool["status"]
    assert not cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}=tiny-llama")["items"]
    readme = (folder / "README.md").read_text()
    assert "TOKENFLEET_ENGINE=vllm-cpu make up" in readme
