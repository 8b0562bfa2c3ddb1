"""`kubectl tokenfleet` against a live rollout on the real control plane, found by kubectl
itself on PATH: status shows phase, weights and the quality scores; pause, resume, promote,
clear and abort each change exactly their documented spec.rollout fields (and nothing else)
and move the rollout; history records the promotion and the abort; pools and top show the
pool's zones and live figures from the stack's Prometheus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_quality_gate import adapted, setup
from test_rollouts import (  # the rollout journey's fixtures: operator, gateway, signed artifact
    POOL,
    Signed,
    Traffic,
    gateway,
    phase_is,
    rollout_operator,
    served,
    signed,
    status,
)

from support.cluster import BIN_DIR, Cluster, wait_for
from support.gateway import Gateway

__all__ = ["gateway", "rollout_operator", "signed"]  # fixtures, used by name


def plugin(cluster: Cluster, ns: str, *args: str) -> str:
    """Run as a user would: `kubectl tokenfleet …`, kubectl finding the plugin on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        [str(BIN_DIR / "kubectl"), "tokenfleet", "-n", ns, *args],
        capture_output=True,
        text=True,
        env={**cluster.env, "PATH": path},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in flat(val, f"{prefix}.{key}").items()}
    return {prefix: obj}


def spec_change(cluster: Cluster, ns: str, ns_args: tuple[str, ...]) -> dict[str, Any]:
    """What one plugin command changed in the spec, as path → new value."""
    before = flat(cluster.get("tfmodel", served(ns), "-n", ns)["spec"])
    plugin(cluster, ns, *ns_args)
    after = flat(cluster.get("tfmodel", served(ns), "-n", ns)["spec"])
    return {k: after.get(k) for k in set(before) | set(after) if before.get(k) != after.get(k)}


@pytest.mark.timeout(900)  # a whole rollout on a shared 2-core machine
def test_the_plugin_drives_and_shows_a_live_rollout(
    cluster: Cluster, ns: str, signed: Signed, gateway: Gateway
) -> None:
    stable, key = setup(cluster, ns, signed)
    body = adapted(ns, signed, "canary-good.yaml")
    body["spec"]["rollout"]["steps"] = [{"weight": 34, "holdSeconds": 600}]  # it waits for us
    name = served(ns)
    with Traffic(gateway, key, name):
        cluster.apply(body)
        wait_for(
            "the canary live and scored",
            lambda: (
                (s := phase_is(cluster, ns, "Progressing"))
                and (s["rollout"].get("quality") or {}).get("verdict") == "Passed"
                and s
            ),
            timeout=180,
        )
        shown = json.loads(plugin(cluster, ns, "-o", "json", "rollout", "status", name))
        canary = shown["canaryRevision"]
        assert (shown["phase"], shown["weights"]) == ("Progressing", {stable: 66, canary: 34})
        assert [s["score"] for s in shown["rollout"]["scores"]] == [1.0, 1.0]
        table = plugin(cluster, ns, "rollout", "status", name)
        assert "Phase:         Progressing" in table and "Quality and cost:" in table, table
        as_yaml = yaml.safe_load(plugin(cluster, ns, "-o", "yaml", "rollout", "status", name))
        assert (as_yaml["phase"], as_yaml["weights"]) == (shown["phase"], shown["weights"])

        assert spec_change(cluster, ns, ("rollout", "pause", name)) == {".rollout.paused": True}
        wait_for("paused", lambda: phase_is(cluster, ns, "Paused"), timeout=30)
        assert spec_change(cluster, ns, ("rollout", "resume", name)) == {".rollout.paused": False}
        wait_for("resumed", lambda: phase_is(cluster, ns, "Progressing"), timeout=30)
        assert spec_change(cluster, ns, ("rollout", "promote", name)) == {".rollout.promote": True}
        done = wait_for("promoted", lambda: phase_is(cluster, ns, "Promoted"), timeout=30)
        assert done["stableRevision"] == canary

        history = json.loads(plugin(cluster, ns, "-o", "json", "rollout", "history", name))
        last = history["history"][-1]
        assert (last["revision"], last["outcome"], last["reason"]) == (
            canary,
            "Promoted",
            "ManualPromote",
        )
        assert last["digest"] == signed.digest and last["signer"].startswith("key:")

        # promote is a level: clear it before the next rollout, or it promotes that one too
        assert spec_change(cluster, ns, ("rollout", "clear", name)) == {".rollout.promote": False}
        body["spec"]["engine"] = {"extraArgs": ["--seed", "9"]}
        cluster.apply(body)
        wait_for("the next canary live", lambda: phase_is(cluster, ns, "Progressing"), 120)
        assert spec_change(cluster, ns, ("rollout", "abort", name)) == {".rollout.abort": True}
        back = wait_for("aborted", lambda: phase_is(cluster, ns, "RolledBack"), timeout=30)
        assert back["rollout"]["reason"] == "Aborted"
        text = plugin(cluster, ns, "rollout", "history", name)
        assert text.splitlines()[-1].split()[-2:] == ["RolledBack", "Aborted"], text

        pools = json.loads(plugin(cluster, ns, "-o", "json", "pools"))["pools"]
        assert [p["name"] for p in pools] == [POOL]
        assert sorted(z["name"] for z in pools[0]["zones"]) == ["zone-a", "zone-b", "zone-c"]
        assert "zone-a" in plugin(cluster, ns, "pools")
        live = json.loads(
            plugin(cluster, ns, "-o", "json", "top", "--prometheus", cluster.info["prometheus"])
        )["pools"][0]
        assert live["pool"] == POOL and live["ttft_p99"] > 0 and live["kv_usage"] is not None
    st = status(cluster, ns)
    assert [h["outcome"] for h in st["history"]] == ["Promoted", "Promoted", "RolledBack"]


def test_a_refused_control_is_one_line_and_exit_1(cluster: Cluster, ns: str) -> None:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        [str(BIN_DIR / "kubectl"), "tokenfleet", "-n", ns, "rollout", "pause", "missing"],
        capture_output=True,
        text=True,
        env={**cluster.env, "PATH": path},
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and done.stderr.startswith("kubectl tokenfleet: 404"), done
