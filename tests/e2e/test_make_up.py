"""The README's journey on the whole local platform: `up` starts everything (control plane,
simulated GPU nodes, operator, Redis, gateway, dev tenant, examples) and prints how to use it;
the printed gateway and dev key answer the openai SDK; with only the printed KUBECONFIG and
PATH, `kubectl tokenfleet` answers and `tokenfleet usage` finds the gateway's ledger and the dev
tenant's requests in it; the remote region and the provider (host processes in both modes)
answer with the keys the stack generated; a ModelRoute whose
remote is region-b goes on answering through it while the whole example pool is lost, and comes
back to the pool after; `down` leaves no process behind, and nothing of the real node (mounts,
bridge, iptables chains, hosts entry).

Twice: as `make up` runs it (a real node, TokenFleet installed from the chart as pods on it) and
without the real node (operator, Redis and gateway as host processes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from support.cluster import BIN_DIR, REPO, alive, wait_for
from support.realnode import host_leftovers
from tokenfleet.devstack import realnode


def devstack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenfleet.devstack", *args, "--bin-dir", str(BIN_DIR)],
        capture_output=True,
        text=True,
        timeout=540,  # above devstack up's own start-up limit
        check=False,
        cwd=REPO,
    )


@pytest.mark.timeout(900)  # make up, the journeys (a spill waits up to 330 s), make down
@pytest.mark.parametrize("real_node", [True, False], ids=["chart-on-real-node", "host-processes"])
def test_up_serves_the_examples_through_the_gateway_and_down_cleans_up(
    tmp_path: Path, real_node: bool
) -> None:
    state = tmp_path / "state"
    node_flag = "--real-node" if real_node else "--no-real-node"
    up = devstack(
        "up", "--state-dir", str(state), "--ports", "auto", "--pod-octet", "auto", node_flag
    )
    assert up.returncode == 0, up.stdout + up.stderr
    info = json.loads((state / "stack.json").read_text())
    try:
        if real_node:
            # The gateway turns Ready once it has seen the dev tenant and a ready worker.
            wait_for(
                "the chart's operator, gateway and Redis Ready on the real node",
                lambda: (
                    chart_pods_on_the_real_node(info["kubeconfig"])
                    == {"operator", "gateway", "redis"}
                ),
                timeout=180,
                every=2.0,
            )
            assert not {"tokenfleet-operator", "redis", "tokenfleet-gateway"} & set(
                info["children"]
            )
        else:
            assert {"tokenfleet-operator", "redis", "tokenfleet-gateway"} <= set(info["children"])
        assert {"region-b-gateway", "region-b-chat-small", "provider", "provider-engine"} <= set(
            info["children"]
        )
        remotes_answer(state, info["remotes"], up.stdout)
        url = re.search(r"curl (http://127\.0\.0\.1:\d+)/v1/chat/completions", up.stdout)
        assert url, up.stdout
        key = (state / "dev-api-key").read_text().strip()
        assert key.startswith("tfk-") and (state / "dev-api-key").stat().st_mode & 0o077 == 0
        client = openai.OpenAI(base_url=url.group(1) + "/v1", api_key=key, max_retries=0)

        def answers() -> bool:
            try:
                return bool(
                    client.chat.completions.create(
                        model="llama-3.1-8b-instruct",
                        messages=[{"role": "user", "content": "Hello"}],
                        max_tokens=5,
                    ).choices
                )
            except openai.APIError:
                return False

        wait_for("the example model to answer through the gateway", answers, timeout=90, every=1.0)
        the_printed_commands_read_the_ledger(up.stdout, info)
        env = {**os.environ, "KUBECONFIG": info["kubeconfig"]}

        def settled() -> dict[str, int] | None:
            pools = subprocess.run(
                [str(BIN_DIR / "kubectl"), "get", "tfpool", "chat-h100", "-o", "json"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            status = json.loads(pools.stdout).get("status", {})
            desired, ready = int(status.get("replicas", 0)), int(status.get("readyReplicas", 0))
            return {"desired": desired, "ready": ready} if desired and ready == desired else None

        # min 6 with tolerateLoss 1 makes 9; the example's Monday-morning schedule asks for more.
        counts = wait_for("the example pool's replicas all ready", settled, timeout=120)
        assert counts["desired"] >= 9
        assert "llama-3.1-8b-instruct" in [m.id for m in client.models.list()]
        # In both modes: the chart's gateway pod shares the real node's network namespace
        # (values-local.yaml, hostNetwork), so it reaches region-b on loopback as a host
        # process does.
        a_lost_pool_spills_to_region_b_and_returns(client, info, env)
    finally:
        down = devstack("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
    for name, pid in {"stack": info["pid"], **info["children"]}.items():
        assert wait_for(f"{name} to exit", lambda pid=pid: not alive(pid), timeout=30)
    if real_node:  # containers, shims, mounts, the bridge, iptables chains, the hosts entry
        assert not host_leftovers(state)


def a_lost_pool_spills_to_region_b_and_returns(
    client: openai.OpenAI, info: dict[str, Any], env: dict[str, str]
) -> None:
    """The whole example pool lost (every node cordoned, every worker pod deleted): a route
    with region-b as its remote keeps answering through it, saying so; the nodes back, its
    answers come from the local pool again."""
    region_b = info["remotes"]["region-b"]
    route = {
        "apiVersion": "tokenfleet.io/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": "demo-auto", "namespace": "default"},
        "spec": {
            "name": "demo-auto",
            "defaultTargets": [{"model": "llama-3.1-8b-instruct"}],
            "remotes": [
                {
                    "name": "region-b",
                    "kind": "Gateway",
                    "baseUrl": region_b,
                    "model": "chat-auto",  # what region-b grants the region-a key
                    "apiKeySecret": {"name": "region-b-key"},
                }
            ],
        },
    }

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(BIN_DIR / "kubectl"), *args],
            input=stdin, capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        return done.stdout

    def served_by() -> str | None:
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="demo-auto", messages=[{"role": "user", "content": "Hello"}], max_tokens=3
            )
        except openai.APIError:
            return None
        return raw.headers.get("X-TokenFleet-Target", "local") + "|" + raw.parse().model

    kubectl("apply", "-f", "-", stdin=json.dumps(route))
    assert wait_for("the route served locally", served_by, timeout=60, every=1.0) == (
        "local|llama-3.1-8b-instruct"
    )
    nodes = kubectl("get", "nodes", "-o", "name").split()
    kubectl("cordon", *nodes)
    kubectl("delete", "pods", "-n", "default", "-l", "tokenfleet.io/pool=chat-h100", "--wait=false")
    spilled = wait_for(
        "the route to spill to region-b",
        lambda: (who := served_by()) and who.startswith("remote/region-b") and who,
        timeout=90,
        every=0.5,
    )
    assert spilled in ("remote/region-b|chat-small", "remote/region-b|chat-large")
    assert all((served_by() or "").startswith("remote/region-b|") for _ in range(5))
    kubectl("uncordon", *nodes)
    wait_for(
        "traffic back on the local pool",
        lambda: served_by() == "local|llama-3.1-8b-instruct",
        timeout=180,
        every=1.0,
    )


def the_printed_commands_read_the_ledger(printed: str, info: dict[str, Any]) -> None:
    """With only the printed KUBECONFIG and PATH, `tokenfleet usage` finds the gateway's ledger
    (chart: through the gateway's Deployment and the Redis Secret; host processes: the
    redis-url beside the kubeconfig) and lists the dev tenant's requests; `kubectl tokenfleet`
    is on that PATH too."""
    path = re.search(r"^  export PATH=(\S+):\$PATH", printed, re.MULTILINE)
    assert path, printed
    env = {
        "KUBECONFIG": info["kubeconfig"],
        "PATH": f"{path.group(1)}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
    }

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    pools = run("kubectl", "tokenfleet", "pools", "-n", "default", "-o", "json")
    assert pools.returncode == 0, pools.stderr

    def dev_served() -> bool:
        done = run("tokenfleet", "usage", "--since", "1h", "-o", "json")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        return any(r["tenant"].endswith("/dev") and r["outcome"] == "served" for r in rows)

    # the gateway writes its ledger behind the requests, every few seconds
    wait_for("the dev tenant's requests in the ledger", dev_served, timeout=60, every=2.0)


def remotes_answer(state: Path, urls: dict[str, str], printed: str) -> None:
    """Region-b serves chat-auto to the region-a key, the provider provider-large to its key;
    both URLs are in the printout."""
    asked = {
        "region-b": ("region-b-key", "chat-auto"),
        "provider": ("provider-key", "provider-large"),
    }
    for remote, (secret, model) in asked.items():
        assert urls[remote] in printed
        key = (state / "remote-keys" / secret / "api-key").read_text()
        client = openai.OpenAI(base_url=urls[remote], api_key=key, max_retries=0)
        answer = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=3
        )
        assert answer.model in ({"chat-small", "chat-large"} if remote == "region-b" else {model})
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=urls[remote], api_key="tfk-wrong", max_retries=0).models.list()


def chart_pods_on_the_real_node(kubeconfig: str) -> set[str]:
    """Components of the chart's Ready pods that run on the real node."""
    done = subprocess.run(
        [str(BIN_DIR / "kubectl"), "get", "pods", "-n", "tokenfleet-system", "-o", "json"],
        capture_output=True, text=True, env={**os.environ, "KUBECONFIG": kubeconfig}, check=True,
    )  # fmt: skip
    out = set()
    for pod in json.loads(done.stdout)["items"]:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions", [])
        )
        if ready and pod["spec"].get("nodeName") == realnode.NODE_NAME:
            out.add(pod["metadata"]["labels"].get("app.kubernetes.io/component", "?"))
    return out
