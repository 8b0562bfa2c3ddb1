"""The gateway in Kubernetes mode, with its own least-privilege account: tenants and key hashes
from CRDs and Secrets (made by `tokenfleet tenant create-key`), endpoints from the operator's
worker pods, key rotation and revocation, ModelAdapters served through the worker pods' real
adapter-loader sidecars, and the manifests accepted by the API server."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from support import adapters, artifact
from support.cluster import REPO, Cluster, namespace, wait_for
from support.gateway import Gateway, gateway_metric, running, start_gateway
from support.objects import manifest
from support.operator import SA_NAMESPACE, service_account_kubeconfig
from tokenfleet.api import labels
from tokenfleet.signals import gateway as gateway_names
from tokenfleet.signing import keys as signing_keys


@pytest.fixture(scope="module")
def gateway_kubeconfig(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return service_account_kubeconfig(
        cluster,
        tmp_path_factory.mktemp("gw") / "kubeconfig",
        component="gateway",
        account="tokenfleet-gateway",
    )


def create_key(cluster: Cluster, ns: str, tenant: str, *extra: str) -> str:
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "tokenfleet"),
            "tenant",
            "create-key",
            tenant,
            "-n",
            ns,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=cluster.env,
        cwd=REPO,
        check=True,
    )
    assert "not shown again" in done.stderr
    return done.stdout.strip()


def deploy(
    cluster: Cluster,
    ns: str,
    *,
    served: str = "kube-model",
    aliases: tuple[str, ...] = ("kube",),
    zones: tuple[str, ...] = ("zone-a", "zone-b", "zone-c"),
    replicas: tuple[int, int] = (3, 6),
) -> None:
    """A pool (kpool), a model on it (kmodel), its trust Secret and a tenant (team) allowed to
    call it."""
    cluster.apply(
        artifact.trust_secret(ns),
        manifest(
            "InferencePool",
            "kpool",
            ns,
            {"zones": {"names": list(zones)}, "replicas": {"min": replicas[0], "max": replicas[1]}},
        ),
        manifest(
            "ModelDeployment",
            "kmodel",
            ns,
            {
                "model": {"name": served, "aliases": list(aliases)},
                "pools": ["kpool"],
                "artifact": artifact.spec(),
            },
        ),
        manifest(
            "Tenant",
            "team",
            ns,
            {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": [served]},
        ),
    )


@pytest.fixture
def gateway(tmp_path: Path, gateway_kubeconfig: Path, operator: Any) -> Iterator[Gateway]:
    env = {"KUBECONFIG": str(gateway_kubeconfig)}
    with running(start_gateway(tmp_path, None, env=env, ready=False)) as g:
        yield g


def endpoints_metric(g: Gateway, model: str) -> float:
    for line in g.get("/metrics")[1].splitlines():
        if line.startswith(f'tokenfleet_gateway_ready_endpoints{{model="{model}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return -1.0


def test_gateway_serves_tenants_and_pods_from_the_cluster(
    cluster: Cluster, ns: str, gateway: Gateway
) -> None:
    deploy(cluster, ns)
    waiting = wait_for(
        "NoKeys", lambda: (c := _tenant_ready(cluster, ns)).get("reason") == "NoKeys" and c
    )
    assert "tokenfleet tenant create-key team" in waiting["message"]
    key = create_key(cluster, ns, "team")
    ready = wait_for(
        "Ready", lambda: (c := _tenant_ready(cluster, ns)).get("status") == "True" and c
    )
    assert ready["reason"] == "KeysPresent"
    row = cluster.kubectl("get", "tftenant", "team", "-n", ns, "--no-headers").stdout.split()
    assert row[1:3] == ["interactive", "1"]  # Class, Keys columns
    secret = cluster.get("secret", "team-keys", "-n", ns)
    assert secret["metadata"]["labels"]["tokenfleet.io/api-keys"] == "true"
    stored = [base64.b64decode(v).decode() for v in secret["data"].values()]
    assert all(v.startswith("sha256:") for v in stored) and key not in str(secret)
    wait_for("3 endpoints", lambda: endpoints_metric(gateway, "kube-model") == 3, timeout=90)
    wait_for("ready", lambda: gateway.get("/readyz")[0] == 200, timeout=30)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    wait_for("the key to be known", lambda: _works(client), timeout=20)
    raw = client.chat.completions.with_raw_response.create(
        model="kube", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert raw.headers["X-TokenFleet-Model"] == "kube-model" and raw.parse().choices
    assert "kube-model" in [m.id for m in client.models.list()]

    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}=kpool")["items"]
    cluster.kubectl("delete", "pod", pods[0]["metadata"]["name"], "-n", ns, "--wait=false")
    wait_for(
        "the deleted pod to leave the snapshot",
        lambda: endpoints_metric(gateway, "kube-model") == 2,
        timeout=20,
        every=0.05,
    )
    wait_for(
        "its replacement to join", lambda: endpoints_metric(gateway, "kube-model") == 3, timeout=60
    )
    for _ in range(6):  # no request reaches a pod that is gone
        assert client.chat.completions.create(
            model="kube-model", messages=[{"role": "user", "content": "x"}], max_tokens=2
        ).choices
    log = gateway.log.read_text()
    assert key not in log and "Traceback" not in log


def _tenant_ready(cluster: Cluster, ns: str) -> dict[str, Any]:
    status = cluster.get("tftenant", "team", "-n", ns).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})


def _works(client: openai.OpenAI) -> bool:
    try:
        client.models.list()
    except openai.AuthenticationError:
        return False
    return True


def test_keys_rotate_and_revoke(cluster: Cluster, ns: str, gateway: Gateway) -> None:
    deploy(cluster, ns)
    old = create_key(cluster, ns, "team")
    new = create_key(cluster, ns, "team")
    clients = {
        k: openai.OpenAI(base_url=gateway.url + "/v1", api_key=k, max_retries=0) for k in (old, new)
    }
    wait_for("both keys to work", lambda: all(_works(c) for c in clients.values()), timeout=30)
    newest = create_key(cluster, ns, "team", "--replace")
    wait_for(
        "the old keys to be revoked",
        lambda: not _works(clients[old]) and not _works(clients[new]),
        timeout=20,
    )
    assert wait_for(
        "the newest key",
        lambda: _works(openai.OpenAI(base_url=gateway.url + "/v1", api_key=newest, max_retries=0)),
    )


def test_the_api_server_going_away_and_coming_back(
    cluster: Cluster, ns: str, gateway: Gateway
) -> None:
    """The API server stops answering for 15 s (SIGSTOP: its connections hang, as in a
    partition) and comes back (issue 35). Meanwhile the gateway serves from its last catalog and
    stays Ready, and a key revoked before the outage stays revoked; afterwards its watches
    resume (a key made after the outage works) and the operator acts on a change without a
    restart."""
    deploy(cluster, ns)
    revoked = create_key(cluster, ns, "team")
    old = openai.OpenAI(base_url=gateway.url + "/v1", api_key=revoked, max_retries=0)
    wait_for("the first key to work", lambda: _works(old), timeout=30)
    kept = create_key(cluster, ns, "team", "--replace")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=kept, max_retries=0)
    wait_for("the first key revoked", lambda: not _works(old), timeout=20)
    wait_for("the new key", lambda: _works(client), timeout=20)
    wait_for("3 endpoints", lambda: endpoints_metric(gateway, "kube-model") == 3, timeout=90)
    apiserver = cluster.children()["kube-apiserver"]
    os.kill(apiserver, signal.SIGSTOP)
    try:
        time.sleep(3)  # every watch now hangs
        for _ in range(5):
            answer = client.chat.completions.create(
                model="kube-model", messages=[{"role": "user", "content": "x"}], max_tokens=2
            )
            assert answer.choices
        assert not _works(old), "a revoked key came back while the API server was away"
        assert gateway.get("/readyz")[0] == 200
        time.sleep(12)
        assert client.models.list().data and not _works(old)
    finally:
        os.kill(apiserver, signal.SIGCONT)
    newest = create_key(cluster, ns, "team")  # added beside `kept` (no --replace)
    fresh = openai.OpenAI(base_url=gateway.url + "/v1", api_key=newest, max_retries=0)
    wait_for("a key made after the outage (the watch resumed)", lambda: _works(fresh), timeout=60)
    assert not _works(old)
    cluster.kubectl("patch", "tfpool", "kpool", "-n", ns, "--type", "merge", "-p",
                    '{"spec": {"replicas": {"min": 6, "max": 6}}}')  # fmt: skip
    wait_for(
        "the operator to scale after the outage",
        lambda: endpoints_metric(gateway, "kube-model") == 6,
        timeout=120,
    )
    assert "Traceback" not in gateway.log.read_text()


def test_gateway_account_is_read_only(cluster: Cluster, gateway_kubeconfig: Path) -> None:
    who = f"system:serviceaccount:{SA_NAMESPACE}:tokenfleet-gateway"
    for verb, resource, allowed in [
        ("watch", "tenants.tokenfleet.io", "yes"),
        ("list", "pods", "yes"),
        ("create", "secrets", "no"),
        ("delete", "pods", "no"),
        ("patch", "inferencepools.tokenfleet.io", "no"),
    ]:
        answer = cluster.kubectl(
            "auth", "can-i", verb, resource, "--as", who, "-A", check=False
        ).stdout.strip()
        assert answer == allowed, (verb, resource)


def test_manifests_are_accepted_by_the_api_server(cluster: Cluster) -> None:
    cluster.kubectl(
        "apply", "-f", str(REPO / "manifests" / "base" / "namespace" / "namespace.yaml")
    )
    for folder in ("operator", "gateway"):
        done = cluster.kubectl(
            "apply", "--dry-run=server", "-k", str(REPO / "manifests" / folder), check=False
        )
        assert done.returncode == 0, done.stderr


def test_a_gateway_pod_learns_its_zone_from_its_node(cluster: Cluster, ns: str) -> None:
    """The manifest's TOKENFLEET_ZONE reads the pod's zone label, which the API server copies
    from the node when it binds the pod: same-zone routing in-cluster needs no node access."""
    docs = yaml.safe_load_all((REPO / "manifests" / "gateway" / "deployment.yaml").read_text())
    template = next(d for d in docs if d and d["kind"] == "Deployment")["spec"]["template"]
    env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
    field = env["TOKENFLEET_ZONE"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == f"metadata.labels['{labels.TOPOLOGY_ZONE}']"
    spec = {k: v for k, v in template["spec"].items() if k != "serviceAccountName"}
    spec["nodeSelector"] = {labels.TOPOLOGY_ZONE: "zone-b"}
    spec["tolerations"] = [{"operator": "Exists"}]
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "gateway",
                "namespace": ns,
                "labels": template["metadata"]["labels"],
            },
            "spec": spec,
        }
    )

    def bound() -> dict[str, Any] | None:
        pod = cluster.get("pod", "gateway", "-n", ns)
        return pod if pod["spec"].get("nodeName") else None

    pod = wait_for("the gateway pod to be scheduled", bound, timeout=30)
    node = cluster.get("node", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"][labels.TOPOLOGY_ZONE] == "zone-b"
    assert pod["metadata"]["labels"][labels.TOPOLOGY_ZONE] == "zone-b"


def test_two_teams_each_reach_their_own_model_of_one_name(
    cluster: Cluster, ns: str, gateway: Gateway
) -> None:
    """Team A and team B both deploy a model served as the same name: each team's key reaches
    its own namespace's replicas, never the other's. A third namespace with a Tenant allowed
    that name but no model of it is served neither (404 model_not_found naming its namespace;
    before issue 35's finding 4 was closed, it got team A's, the first by namespace/name) until
    team A shares it (spec.sharedWith): then team A's replicas answer it."""
    served = f"chat-{uuid.uuid4().hex[:6]}"  # the gateway sees every namespace: unique per run
    with namespace(cluster, f"{ns}-b") as other, namespace(cluster, f"{ns}-c") as third:
        keys = {}
        for team in (ns, other):
            deploy(cluster, team, served=served, aliases=(), zones=("zone-a",), replicas=(1, 1))
            keys[team] = create_key(cluster, team, "team")
        wait_for("2 endpoints", lambda: endpoints_metric(gateway, served) == 2, timeout=90)
        for team, key in keys.items():
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
            wait_for("the key to be known", lambda c=client: _works(c), timeout=20)
            for i in range(4):
                request_id = f"{team}-{i}"
                client.chat.completions.create(
                    model=served,
                    messages=[{"role": "user", "content": "hi"}],
                    max_tokens=2,
                    extra_headers={"X-Request-Id": request_id},
                )
                line = wait_for(
                    "the access log line",
                    lambda rid=request_id: next(
                        (
                            json.loads(x[x.index("{") :])
                            for x in gateway.log.read_text().splitlines()
                            if f'"{rid}"' in x and "{" in x
                        ),
                        None,
                    ),
                    timeout=10,
                )
                assert line["pool"] == f"{team}/kpool", line
        cluster.apply(
            manifest(
                "Tenant",
                "team",
                third,
                {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": [served]},
            )
        )
        client = openai.OpenAI(
            base_url=gateway.url + "/v1", api_key=create_key(cluster, third, "team"), max_retries=0
        )
        wait_for("the key to be known", lambda: _works(client), timeout=20)
        with pytest.raises(openai.NotFoundError) as refused:
            client.chat.completions.create(
                model=served, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
        assert refused.value.code == "model_not_found", refused.value
        assert f"served to namespace '{third}'" in refused.value.message, refused.value.message
        assert served not in [m.id for m in client.models.list()]
        shared = manifest(
            "ModelDeployment",
            "kmodel",
            ns,
            {
                "model": {"name": served},
                "pools": ["kpool"],
                "artifact": artifact.spec(),
                "sharedWith": [third],
            },
        )
        cluster.apply(shared)
        wait_for(
            "the shared model to be listed",
            lambda: served in [m.id for m in client.models.list()],
            timeout=20,
        )
        client.chat.completions.create(
            model=served,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            extra_headers={"X-Request-Id": f"{third}-shared"},
        )
        line = wait_for(
            "the access log line",
            lambda: next(
                (
                    json.loads(x[x.index("{") :])
                    for x in gateway.log.read_text().splitlines()
                    if f'"{third}-shared"' in x and "{" in x
                ),
                None,
            ),
            timeout=10,
        )
        assert line["pool"] == f"{ns}/kpool", line


def test_gateway_routes_modeladapters_from_the_cluster(
    cluster: Cluster, ns: str, gateway: Gateway, tmp_path: Path
) -> None:
    """ModelAdapters are watched: the operator verifies a signed one against the base's adapter
    trust and the gateway then serves it on the base's worker through the pod's real
    adapter-loader sidecar (podIP:8002, from the pod's ``adapters`` port); one the operator
    refused is 503 naming the reason; one that names another tenant is 403."""
    private, public = signing_keys.generate(tmp_path / "keys")
    good = adapters.signed_adapter(tmp_path, "k-support", private_key=private)
    bad = adapters.signed_adapter(tmp_path, "k-legal", private_key=private)
    (bad.path / "adapter_model.safetensors").write_bytes(b"swapped after signing")
    cluster.apply(
        artifact.trust_secret(ns),
        artifact.trust_secret(ns, name="adapter-key", public_key=public.read_text()),
        manifest("InferencePool", "kpool", ns, {"zones": {"names": ["zone-a"]}}),
        manifest(
            "ModelDeployment",
            "kbase",
            ns,
            {
                "model": {"name": f"kbase-{ns}"},  # the gateway sees every namespace
                "pools": ["kpool"],
                "artifact": artifact.spec(),
                "engine": {"lora": {"maxLoras": 2}},
                "adapters": {"trust": {"publicKey": {"name": "adapter-key"}}},
            },
        ),
        manifest(
            "Tenant",
            "team",
            ns,
            {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": [f"kbase-{ns}"]},
        ),
        *(
            manifest(
                "ModelAdapter",
                name,
                ns,
                {
                    "base": "kbase",
                    "servedName": f"{name}-{ns}",
                    "artifact": {"uri": signed.uri, "digest": signed.digest},
                    "tenants": tenants,
                },
            )
            for name, signed, tenants in (
                ("k-support", good, ["team"]),
                ("k-legal", bad, ["team"]),
                ("k-other", good, ["someone-else"]),
            )
        ),
    )
    client = openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=create_key(cluster, ns, "team"), max_retries=0
    )
    wait_for("the key to be known", lambda: _works(client), timeout=30)
    wait_for("the base's worker", lambda: endpoints_metric(gateway, f"kbase-{ns}") == 1, timeout=90)

    def ask(name: str) -> Any:
        return client.chat.completions.create(
            model=f"{name}-{ns}", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )

    answer = wait_for("the verified adapter served", lambda: _served(ask, "k-support"), timeout=90)
    assert answer.model == f"k-support-{ns}"
    (pod,) = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}=kpool")["items"]
    loaded = gateway_metric(
        gateway, gateway_names.ADAPTER_LOADED, adapter=f"k-support-{ns}", namespace=ns
    )
    assert loaded == 1 and f'pod="{pod["metadata"]["name"]}"' in gateway.get("/metrics")[1]
    refused = wait_for(
        "the refused adapter's 503", lambda: _code(ask, "k-legal") == "adapter_refused", timeout=60
    )
    assert refused
    with pytest.raises(openai.InternalServerError, match="DigestMismatch"):
        ask("k-legal")
    with pytest.raises(openai.PermissionDeniedError):
        ask("k-other")


def _served(ask: Any, name: str) -> Any:
    try:
        return ask(name)
    except (openai.InternalServerError, openai.NotFoundError):
        return None  # not verified yet, or not watched yet


def _code(ask: Any, name: str) -> str | None:
    try:
        ask(name)
    except openai.APIStatusError as failed:
        return str(failed.code)
    return None


def _route_ready(cluster: Cluster, ns: str, name: str, kind: str = "Ready") -> dict[str, Any]:
    status = cluster.get("tfroute", name, "-n", ns).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def _remotes_ready_follows_the_key_secrets(cluster: Cluster, ns: str, served: str) -> None:
    secret = f"{ns}-remote-key"[:63]
    remote = {"name": "elsewhere", "kind": "Gateway", "baseUrl": "http://127.0.0.1:9/v1"}
    route = {
        "name": f"spill-{ns}",
        "defaultTargets": [{"model": served}],
        "remotes": [{**remote, "apiKeySecret": {"name": secret}}],
    }
    cluster.apply(manifest("ModelRoute", "spill", ns, route))

    def reason(wanted: str) -> dict[str, Any] | None:
        c = _route_ready(cluster, ns, "spill", "RemotesReady")
        return c if c.get("reason") == wanted else None

    gone = wait_for("the missing key Secret reported", lambda: reason("KeySecretNotFound"), 60)
    assert gone["status"] == "False"
    assert f"{SA_NAMESPACE}/{secret} does not exist" in gone["message"]
    assert "gateway.remoteKeySecrets" in gone["message"]
    value = "remote-token-never-in-status"
    key_secret: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret"}
    key_secret["metadata"] = {"name": secret, "namespace": SA_NAMESPACE}
    try:
        cluster.apply({**key_secret, "stringData": {"other": value}})
        missing = wait_for("the missing key reported", lambda: reason("KeyMissing"), 60)
        assert "no key 'api-key'" in missing["message"]
        cluster.apply({**key_secret, "stringData": {"api-key": value}})
        unbound = wait_for("the unbound key reported", lambda: reason("KeyUnbound"), 60)
        assert "no key 'base-url'" in unbound["message"]
        cluster.apply({**key_secret, "stringData": {"api-key": value, "base-url": "x"}})
        found = wait_for("the key found", lambda: reason("KeysFound"), 60)
        assert found["status"] == "True" and f"{secret}/api-key" in found["message"]
        assert _route_ready(cluster, ns, "spill")["reason"] == "TargetsFound"
        assert value not in json.dumps(cluster.get("tfroute", "spill", "-n", ns))
    finally:
        cluster.kubectl("delete", "secret", secret, "-n", SA_NAMESPACE, "--ignore-not-found")


def test_gateway_serves_modelroutes_and_the_operator_reports_them(
    cluster: Cluster, ns: str, gateway: Gateway
) -> None:
    """ModelRoutes and their classifier ConfigMaps are watched: the operator reports a route
    whose targets are served and whose labelled ConfigMap parses Ready=True TargetsFound, and
    one to a missing model Ready=False TargetNotFound naming it; the gateway (its own account,
    which may list ConfigMaps) serves the first, its classifier choosing the rule, the answer
    naming the target model. A route with remotes gets RemotesReady from their key Secrets in
    the gateway's namespace (the operator's default, tokenfleet-system): KeySecretNotFound,
    KeyMissing, then KeysFound once the key is there; the other routes get none."""
    served = f"kr-{ns}"  # the gateway sees every namespace
    example = yaml.safe_load(
        (REPO / "examples" / "09-model-routes" / "classifier-configmap.yaml").read_text()
    )
    example["metadata"]["namespace"] = ns
    rule = {"name": "hard-prompts", "match": {"classifierAbove": 0.8}}
    cluster.apply(
        artifact.trust_secret(ns),
        example,
        manifest("InferencePool", "kpool", ns, {"zones": {"names": ["zone-a"]}}),
        manifest(
            "ModelDeployment",
            "kmodel",
            ns,
            {"model": {"name": served}, "pools": ["kpool"], "artifact": artifact.spec()},
        ),
        manifest(
            "Tenant",
            "team",
            ns,
            {
                "apiKeySecretRef": {"name": "team-keys"},
                "allowedModels": [f"auto-{ns}", f"lost-{ns}"],
            },
        ),
        manifest(
            "ModelRoute",
            "auto",
            ns,
            {
                "name": f"auto-{ns}",
                "classifier": {"configMap": example["metadata"]["name"]},
                "rules": [{**rule, "targets": [{"model": served}]}],
                "defaultTargets": [{"model": served}],
            },
        ),
        manifest(
            "ModelRoute",
            "lost",
            ns,
            {"name": f"lost-{ns}", "defaultTargets": [{"model": f"gone-{ns}"}]},
        ),
    )
    ready = wait_for(
        "the route Ready",
        lambda: (c := _route_ready(cluster, ns, "auto")).get("status") == "True" and c,
        timeout=60,
    )
    assert ready["reason"] == "TargetsFound" and served in ready["message"]
    lost = wait_for(
        "the lost route reported",
        lambda: (c := _route_ready(cluster, ns, "lost")).get("reason") == "TargetNotFound" and c,
        timeout=60,
    )
    assert lost["status"] == "False" and f"gone-{ns}" in lost["message"]
    row = cluster.kubectl("get", "tfroute", "auto", "-n", ns, "--no-headers").stdout
    assert f"auto-{ns}" in row and "True" in row  # the printer columns
    assert _route_ready(cluster, ns, "auto", "RemotesReady") == {}  # no remotes, no condition
    _remotes_ready_follows_the_key_secrets(cluster, ns, served)

    client = openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=create_key(cluster, ns, "team"), max_retries=0
    )
    wait_for("the key to be known", lambda: _works(client), timeout=30)
    wait_for("the model's worker", lambda: endpoints_metric(gateway, served) == 1, timeout=90)

    def ask(prompt: str) -> Any:
        return client.chat.completions.with_raw_response.create(
            model=f"auto-{ns}", messages=[{"role": "user", "content": prompt}], max_tokens=2
        )

    hard = "Find all integer solutions of x^2 - y^2 = 52 and explain the method."
    raw = wait_for("the route served", lambda: _served(ask, hard), timeout=60)
    assert raw.headers["X-TokenFleet-Route"] == f"auto-{ns}/hard-prompts"  # the ConfigMap's weights
    assert raw.headers["X-TokenFleet-Model"] == served and raw.parse().model == served
    easy = ask("What is the capital of Japan?")
    assert easy.headers["X-TokenFleet-Route"] == f"auto-{ns}/default"
    with pytest.raises(openai.InternalServerError, match="which no ModelDeployment"):
        client.chat.completions.create(
            model=f"lost-{ns}", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
