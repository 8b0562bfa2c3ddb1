"""The canary quality gate end to end, from examples/07-quality-canary: the real operator
replays the example's golden set (a ConfigMap) against simulated engines of both revisions.
Covered: a "quantized" canary that is faster but answers wrong is rolled back with
QualityRegression (scores, failures, throughput and cost in status; an Event; a history line);
a canary as fast and as right is promoted; a custom PromQL check fails a step that the built-in
latency thresholds would pass."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_rollouts import (  # the rollout journey's fixtures: operator, gateway, signed artifact
    ANALYSIS,
    POOL,
    WINDOW,
    Signed,
    Traffic,
    condition,
    create_key,
    events,
    gateway,
    phase_is,
    rollout_operator,
    served,
    signed,
    start_stable,
    status,
)

from support.cluster import REPO, Cluster, wait_for
from support.gateway import Gateway
from tokenfleet.operator.signals_source import PrometheusSignals

__all__ = ["gateway", "rollout_operator", "signed"]  # fixtures, used by name

EXAMPLE = REPO / "examples" / "07-quality-canary"


def example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLE / name).read_text()))


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch applied (RFC 7396), as `kubectl patch --type merge` does."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def revision_of_example(patch: str = "") -> dict[str, Any]:
    """The example's ModelDeployment, with a canary patch file applied when named."""
    base = example("modeldeployment.yaml")
    return merged(base, example(patch)) if patch else base


def adapted(ns: str, signed: Signed, patch: str = "", **analysis: Any) -> dict[str, Any]:
    """An example revision in the test's namespace, artifact and pool, with the test's 1 s
    analysis interval and short hold (the example's are minutes-scale for a human)."""
    body = revision_of_example(patch)
    body["metadata"].update(name=served(ns), namespace=ns)
    spec = body["spec"]
    spec["model"]["name"] = served(ns)
    spec["pools"] = [POOL]
    spec["artifact"].update(uri=signed.model_dir.as_uri(), digest=signed.digest)
    spec["artifact"]["trust"] = {"publicKey": {"name": "signing-key"}}
    spec["rollout"]["steps"] = [{"weight": 34, "holdSeconds": 3}]
    spec["rollout"]["analysis"] = {**spec["rollout"]["analysis"], **ANALYSIS, **analysis}
    return body


def setup(cluster: Cluster, ns: str, signed: Signed) -> tuple[str, str]:
    """The golden set and the stable revision; returns (stable revision, tenant API key)."""
    cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE / "golden-set.yaml"))
    stable = start_stable(cluster, ns, signed, first=adapted(ns, signed))
    return stable, create_key(cluster, ns, "team")


def scores(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["role"]: r for r in st["rollout"].get("scores", [])}


def ttft_p99(cluster: Cluster, ns: str, revision: str) -> float | None:
    got = PrometheusSignals(cluster.info["prometheus"]).canary_sample(
        ns, served(ns), revision, window_seconds=WINDOW * 3
    )
    return got.ttft_p99 if got else None


@pytest.mark.timeout(900)  # a whole rollout on a shared 2-core machine
def test_a_faster_canary_that_answers_worse_is_rolled_back_for_quality(
    cluster: Cluster, ns: str, signed: Signed, gateway: Gateway
) -> None:
    stable, key = setup(cluster, ns, signed)
    with Traffic(gateway, key, served(ns)):
        cluster.apply(adapted(ns, signed, "canary-quantized.yaml"))
        back = wait_for("the rollback", lambda: phase_is(cluster, ns, "RolledBack"), timeout=180)
        canary = str(back["canaryRevision"])
        latency = {rev: ttft_p99(cluster, ns, rev) for rev in (stable, canary)}
    rolled = condition(back, "RolledBack")
    assert (rolled["status"], rolled["reason"]) == ("True", "QualityRegression"), rolled
    quality = back["rollout"]["quality"]
    assert (quality["verdict"], quality["canaryRevision"]) == ("Failed", canary), quality
    by_role = scores(back)
    assert by_role["stable"]["score"] == 1.0, by_role
    assert by_role["canary"]["score"] < 0.95, by_role  # margin 0.05
    assert by_role["canary"]["casesPassed"] < by_role["canary"]["cases"] == 6
    assert any(f.startswith("order-json:") for f in by_role["canary"]["failures"]), by_role
    assert {"QualityRegression", "RolledBack"} <= set(events(cluster, ns))
    last = back["history"][-1]
    assert (last["revision"], last["outcome"], last["reason"]) == (
        canary,
        "RolledBack",
        "QualityRegression",
    )
    assert last["digest"] == signed.digest
    print(
        f"quality: stable {by_role['stable']['score']:.3f}, canary "
        f"{by_role['canary']['score']:.3f} ({by_role['canary']['casesPassed']}/6 cases); "
        f"TTFT p99 stable {latency[stable]}, canary {latency[canary]}; "
        f"figures {json.dumps(back['rollout']['scores'])}"
    )


@pytest.mark.timeout(900)  # a whole rollout on a shared 2-core machine
def test_a_faster_canary_that_answers_as_well_is_promoted(
    cluster: Cluster, ns: str, signed: Signed, gateway: Gateway
) -> None:
    stable, key = setup(cluster, ns, signed)
    body = adapted(ns, signed, "canary-good.yaml")
    body["spec"]["rollout"]["steps"] = [{"weight": 34, "holdSeconds": 10}]  # time to look
    scored: list[dict[str, Any]] = []  # statuses showing both revisions' figures

    def promoted() -> dict[str, Any] | None:
        st = status(cluster, ns)
        rows = scores(st) if st.get("rollout") else {}
        if len(rows) == 2 and all(r.get("costPerMillionTokens") for r in rows.values()):
            scored.append(st)
        return phase_is(cluster, ns, "Promoted")

    with Traffic(gateway, key, served(ns)):
        cluster.apply(body)
        live = wait_for("the canary live", lambda: phase_is(cluster, ns, "Progressing"), 120)
        canary = str(live["canaryRevision"])
        done = wait_for("promotion", promoted, timeout=240, every=0.2)
    assert scored, "no status showed both revisions' quality, throughput and cost"
    measured = scored[-1]
    assert done["stableRevision"] == canary != stable
    by_role = scores(measured)
    assert by_role["canary"]["score"] == by_role["stable"]["score"] == 1.0, by_role
    assert done["rollout"]["quality"]["verdict"] == "Passed"
    assert "QualityPassed" in events(cluster, ns)
    assert [h["outcome"] for h in done["history"]] == ["Promoted", "Promoted"]
    print(f"promoted; figures {json.dumps(measured['rollout']['scores'])}")


@pytest.mark.timeout(900)  # a whole rollout on a shared 2-core machine
def test_a_custom_promql_check_fails_a_step(
    cluster: Cluster, ns: str, signed: Signed, gateway: Gateway
) -> None:
    """The canary's median TTFT (300 ms) is within the built-in p99 ratio (100x here), but a
    team's own check caps the median at 100 ms."""
    stable, key = setup(cluster, ns, signed)
    check = {
        "name": "ttft-median",
        "query": "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_"
        'bucket{namespace="$namespace",model="$model",revision="$revision"}[$window])))',
        "max": 0.2,
    }
    body = adapted(ns, signed, "canary-good.yaml", checks=[check], maxTtftP99Ratio=100)
    body["metadata"]["annotations"]["sim.tokenfleet.io/args"] = (
        "--mode echo --time-to-first-token 300ms"
    )
    with Traffic(gateway, key, served(ns)):
        cluster.apply(body)
        back = wait_for("the rollback", lambda: phase_is(cluster, ns, "RolledBack"), timeout=180)
    rolled = condition(back, "RolledBack")
    assert (rolled["status"], rolled["reason"]) == ("True", "AnalysisFailed"), rolled
    assert "ttft-median" in rolled["message"] and "> max 0.2" in rolled["message"], rolled
    result = back["rollout"]["checks"][0]
    assert (result["name"], result["passed"]) == ("ttft-median", False), result
    assert result["canary"] > 0.2 > result["stable"], result
    assert back["stableRevision"] == stable


def test_the_example_files_parse() -> None:
    """Every YAML in the example is a valid object of its kind (the journeys apply them)."""
    from tokenfleet.api.deployment import ModelDeploymentSpec
    from tokenfleet.api.quality import parse_golden

    for patch in ("", "canary-quantized.yaml", "canary-good.yaml"):
        ModelDeploymentSpec.model_validate(revision_of_example(patch)["spec"])
    assert "apiVersion" not in example("canary-good.yaml")  # a patch, not a second object
    golden = parse_golden(example("golden-set.yaml")["data"]["golden.yaml"], loads=yaml.safe_load)
    assert len(golden.cases) == 6
    assert Path(EXAMPLE / "inferencepool.yaml").exists()
