"""Canary rollouts end to end: the real operator (restartable, with 1 s passes), the node agent
verifying signed artifacts, simulated vLLM engines, a gateway routing by the weights the operator
publishes, and Prometheus scraping both. Covered: a tampered artifact and an untrusted key are
blocked with stable at 100 %; a good canary steps up and is promoted, across an operator restart
mid-rollout, and re-applying it afterwards starts nothing; a slow canary is rolled back within
one analysis interval of its breach becoming measurable."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster import REPO, Cluster, scraped, wait_for
from support.gateway import Gateway, running, start_gateway
from support.objects import manifest
from support.operator import running_operator, service_account_kubeconfig
from tokenfleet.api import labels
from tokenfleet.operator.policy import analysis
from tokenfleet.operator.policy.rollout import Outcome
from tokenfleet.operator.signals_source import PrometheusSignals
from tokenfleet.signing import keys, verify


def served(ns: str) -> str:
    """The model's name (object and served name), unique per test: a gateway resolves served
    names across namespaces, and an earlier test's namespace may still be terminating."""
    return "roll-" + ns.rsplit("-", 1)[-1]


POOL = "roll"
FAST = "--time-to-first-token 20ms --inter-token-latency 5ms"
SLOW = "--time-to-first-token 1500ms --inter-token-latency 5ms"
#: Seconds of Prometheus data each analysis measures: ten 1 s scrapes.
WINDOW = 10
#: A p99 over a few dozen requests is their slowest one, and on a shared 2-core machine one
#: request in a few dozen can take 5x longer (a first run failed a good canary at a ratio of
#: 3); a slow canary's TTFT is ~40x stable's (1.5 s against the 20-40 ms bucket), so a ratio
#: of 10 separates them with room on both sides.
ANALYSIS = {
    "intervalSeconds": 1,
    "minSamples": 5,
    "maxTtftP99Ratio": 10,
    "maxInterTokenP99Ratio": 10,
    "maxErrorRate": 0.05,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Signed:
    model_dir: Path
    digest: str
    public_key: str
    other_key: str  # a key that did not sign it


@pytest.fixture(scope="module")
def signed(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    folder = tmp_path_factory.mktemp("artifact")
    model_dir = folder / "tiny-model"
    shutil.copytree(repo / "examples" / "04-signed-artifact" / "tiny-model", model_dir)
    private, public = keys.generate(folder / "keys")
    _, other = keys.generate(folder / "other-keys")
    digest = verify.sign(model_dir, private_key=private, signature=model_dir / "model.sig")
    return Signed(
        model_dir=model_dir,
        digest=digest,
        public_key=public.read_text(),
        other_key=other.read_text(),
    )


class Operator:
    """The operator under test, which a test may kill and start again."""

    def __init__(self, kubeconfig: Path, folder: Path, prometheus: str) -> None:
        self.kubeconfig, self.folder, self.prometheus = kubeconfig, folder, prometheus
        self.starts = 0
        self._stack = contextlib.ExitStack()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.starts += 1
        self._stack = contextlib.ExitStack()
        self.process = self._stack.enter_context(
            running_operator(
                self.kubeconfig,
                self.folder / f"operator-{self.starts}.log",
                prometheus=self.prometheus,
                env={"TOKENFLEET_ANALYSIS_WINDOW_SECONDS": str(WINDOW)},
            )
        )

    def kill(self) -> None:
        """SIGKILL: no chance to tidy up, as when a node dies."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self._stack.close()

    def logs(self) -> str:
        return "".join(p.read_text() for p in sorted(self.folder.glob("operator-*.log")))


@pytest.fixture(scope="module")
def rollout_operator(
    cluster: Cluster,
    operator_kubeconfig: Path,
    operator: subprocess.Popen[bytes],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    operator.send_signal(signal.SIGSTOP)  # the shared operator must not race the one under test
    own = Operator(
        operator_kubeconfig, tmp_path_factory.mktemp("rollop"), cluster.info["prometheus"]
    )
    try:
        own.start()
        yield own
    finally:
        own.kill()
        operator.send_signal(signal.SIGCONT)
    assert "Traceback" not in own.logs(), own.logs()[-3000:]


@pytest.fixture(scope="module")
def gateway(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, rollout_operator: Operator
) -> Iterator[Gateway]:
    """A gateway in Kubernetes mode, scraped by the stack's Prometheus (pod discovery)."""
    folder = tmp_path_factory.mktemp("rollgw")
    kubeconfig = service_account_kubeconfig(
        cluster, folder / "kubeconfig", component="gateway", account="tokenfleet-gateway"
    )
    with (
        running(start_gateway(folder, None, env={"KUBECONFIG": str(kubeconfig)}, ready=False)) as g,
        scraped(cluster, job="tokenfleet-gateway", port=g.port),
    ):
        yield g


def create_key(cluster: Cluster, ns: str, tenant: str) -> str:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "tokenfleet"), "tenant", "create-key", tenant, "-n", ns],
        capture_output=True,
        text=True,
        env=cluster.env,
        cwd=REPO,
        check=True,
    )
    return done.stdout.strip()


def secret(name: str, public_key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"public.pem": public_key},
    }


def model(
    ns: str,
    signed: Signed,
    *,
    sim: str = FAST,
    uri: str = "",
    key: str = "signing-key",
    engine: dict[str, Any] | None = None,
    steps: list[dict[str, int]] | None = None,
    **controls: bool,
) -> dict[str, Any]:
    body = manifest(
        "ModelDeployment",
        served(ns),
        ns,
        {
            "model": {"name": served(ns)},
            "pools": [POOL],
            "artifact": {
                "uri": uri or signed.model_dir.as_uri(),
                "digest": signed.digest,
                "trust": {"publicKey": {"name": key}},
            },
            "engine": engine or {},
            "rollout": {
                "steps": steps or [{"weight": 34, "holdSeconds": 3}],
                "analysis": ANALYSIS,
                **controls,
            },
        },
    )
    body["metadata"]["annotations"] = {
        labels.SIM_VERIFY_ARTIFACT: "true",
        labels.SIM_ARGS: sim,
    }
    return body


#: A new revision with the same (signed) artifact: engine settings are part of a revision.
CANARY_ENGINE = {"extraArgs": ["--seed", "7"]}


def status(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict(cluster.get("tfmodel", served(ns), "-n", ns).get("status") or {})


def weights(st: dict[str, Any]) -> dict[str, int]:
    return {r["name"]: r["weight"] for r in st.get("revisions", [])}


def condition(st: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions", []) if c["type"] == kind), {})


def events(cluster: Cluster, ns: str) -> list[str]:
    items = cluster.get("events", "-n", ns)["items"]
    return [e["reason"] for e in items if e["involvedObject"]["name"] == served(ns)]


def ready_pods(cluster: Cluster, ns: str) -> Counter[str]:
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}={served(ns)}")["items"]
    return Counter(
        p["metadata"]["labels"][labels.REVISION]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    )


def phase_is(cluster: Cluster, ns: str, phase: str) -> dict[str, Any] | None:
    st = status(cluster, ns)
    return st if (st.get("rollout") or {}).get("phase") == phase else None


def start_stable(cluster: Cluster, ns: str, signed: Signed) -> str:
    """Pool, trust Secrets, tenant and the first revision; wait until it is promoted."""
    cluster.kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        stdin="\n---\n".join(
            json.dumps(d)
            for d in (
                secret("signing-key", signed.public_key),
                secret("other-key", signed.other_key),
                manifest(
                    "InferencePool",
                    POOL,
                    ns,
                    {
                        "zones": {"names": ["zone-a", "zone-b", "zone-c"]},
                        "warm": {"perZone": 1},
                        "replicas": {"min": 3, "max": 3},
                    },
                ),
                manifest(
                    "Tenant",
                    "team",
                    ns,
                    {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": [served(ns)]},
                ),
                model(ns, signed),
            )
        ),
    )
    st = wait_for(
        "the first revision promoted with 3 ready",
        lambda: (
            (s := phase_is(cluster, ns, "Promoted"))
            and s["revisions"][0]["readyReplicas"] == 3
            and s
        ),
        timeout=180,
    )
    assert condition(st, "Verified")["status"] == "True", st
    stable = str(st["stableRevision"])
    assert weights(st) == {stable: 100}
    return stable


class Traffic:
    """Background requests through the gateway; remembers which revision served each."""

    def __init__(self, gateway: Gateway, key: str, model: str, threads: int = 2) -> None:
        self.url, self.key, self.model = gateway.url + "/v1/completions", key, model
        self.served: list[tuple[float, str, int]] = []  # (time, revision, HTTP status)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def _run(self) -> None:
        body = json.dumps({"model": self.model, "prompt": "hello there", "max_tokens": 8}).encode()
        while not self._stop.is_set():
            request = urllib.request.Request(
                self.url,
                data=body,
                headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as r:
                    r.read()
                    self.served.append(
                        (time.time(), r.headers.get("X-TokenFleet-Revision", ""), r.status)
                    )
            except urllib.error.HTTPError as e:
                self.served.append(
                    (time.time(), e.headers.get("X-TokenFleet-Revision", ""), e.code)
                )
                time.sleep(0.2)
            except OSError:
                time.sleep(0.2)

    def codes(self) -> Counter[int]:
        """HTTP statuses the gateway answered so far (for a failure's message)."""
        return Counter(code for _, _, code in list(self.served))

    def since(self, moment: float) -> Counter[str]:
        return Counter(rev for at, rev, code in list(self.served) if at >= moment and code == 200)


def at_step(cluster: Cluster, ns: str, step: int) -> dict[str, Any] | None:
    """Status once the canary is live at ``step``; a rollback or block ends the wait early
    (the caller's assertions then show why)."""
    st = status(cluster, ns)
    phase = (st.get("rollout") or {}).get("phase")
    if phase in ("RolledBack", "Blocked") or (phase == "Progressing" and st["canaryStep"] == step):
        return st
    return None


def stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize(
    ("case", "reason"),
    [pytest.param("tampered", "DigestMismatch"), pytest.param("untrusted", "UntrustedSigner")],
)
def test_a_refused_canary_is_blocked_and_stable_keeps_all_traffic(
    cluster: Cluster,
    ns: str,
    signed: Signed,
    gateway: Gateway,
    tmp_path: Path,
    case: str,
    reason: str,
) -> None:
    stable = start_stable(cluster, ns, signed)
    key = create_key(cluster, ns, "team")
    if case == "tampered":  # the same signature over files one of which changed
        tampered = tmp_path / "tampered"
        shutil.copytree(signed.model_dir, tampered)
        (tampered / "config.json").write_text('{"architectures": ["SomethingElse"]}')
        cluster.apply(model(ns, signed, uri=tampered.as_uri()))
    else:  # the right files, but the trust policy names a key that did not sign them
        cluster.apply(model(ns, signed, key="other-key"))

    st = wait_for("the canary blocked", lambda: phase_is(cluster, ns, "Blocked"), timeout=120)
    canary = str(st["canaryRevision"])
    assert canary != stable
    verified = condition(st, "Verified")
    assert (verified["status"], verified["reason"]) == ("False", reason), verified
    assert st["rollout"]["reason"] == reason
    assert weights(st) == {stable: 100, canary: 0}
    assert "VerificationFailed" in events(cluster, ns)
    assert ready_pods(cluster, ns) == Counter({stable: 3})  # the refused pod never got ready

    started = time.time()
    with Traffic(gateway, key, served(ns)) as traffic:
        try:
            wait_for("20 requests served", lambda: sum(traffic.since(started).values()) >= 20, 60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the gateway answered {traffic.codes()}") from exc
    assert set(traffic.since(started)) == {stable}, traffic.since(started)


def test_good_canary_steps_up_resumes_after_a_restart_and_is_promoted_once(
    cluster: Cluster,
    ns: str,
    signed: Signed,
    gateway: Gateway,
    rollout_operator: Operator,
) -> None:
    stable = start_stable(cluster, ns, signed)
    key = create_key(cluster, ns, "team")
    steps = [{"weight": 34, "holdSeconds": 3}, {"weight": 67, "holdSeconds": 20}]
    with Traffic(gateway, key, served(ns)) as traffic:
        cluster.apply(model(ns, signed, engine=CANARY_ENGINE, steps=steps))
        first = wait_for("the canary at 34 %", lambda: at_step(cluster, ns, 0), 120)
        assert first["rollout"]["phase"] == "Progressing", first
        canary = str(first["canaryRevision"])
        assert weights(first) == {stable: 66, canary: 34}
        second = wait_for("the canary at 67 %", lambda: at_step(cluster, ns, 1), timeout=120)
        assert weights(second) == {stable: 33, canary: 67}, second
        assert "CanaryStepPassed" in events(cluster, ns)
        assert second["rollout"]["lastAnalysis"].startswith("canary within thresholds")
        assert second["rollout"]["lastAnalysisAt"].endswith("Z")  # survives the restart below

        # The operator dies mid-step; its successor resumes the same step, same hold.
        started_at = second["rollout"]["stepStartedAt"]
        rollout_operator.kill()
        at_67 = time.time()
        rollout_operator.start()
        time.sleep(4)  # several passes of the new operator
        resumed = status(cluster, ns)
        assert (resumed["rollout"]["phase"], resumed["canaryStep"]) == ("Progressing", 1)
        assert resumed["rollout"]["stepStartedAt"] == started_at
        assert weights(resumed) == {stable: 33, canary: 67}

        done = wait_for("promotion", lambda: phase_is(cluster, ns, "Promoted"), timeout=120)
        by_revision = traffic.since(at_67)
    assert done["stableRevision"] == canary and weights(done) == {canary: 100}
    assert by_revision[canary] > by_revision[stable] > 0, by_revision  # 67 / 33 while both served
    assert events(cluster, ns).count("Promoted") == 2  # the first revision, then the canary
    wait_for("the old revision retired", lambda: ready_pods(cluster, ns) == {canary: 3}, 120)

    # Re-applying the same manifest (as a GitOps sync does) starts no new rollout.
    before = events(cluster, ns)
    cluster.apply(model(ns, signed, engine=CANARY_ENGINE, steps=steps))
    time.sleep(4)
    after = status(cluster, ns)
    assert (after["rollout"]["phase"], after["stableRevision"]) == ("Promoted", canary)
    assert after["rollout"]["stepStartedAt"] == done["rollout"]["stepStartedAt"]
    assert events(cluster, ns) == before


def test_slow_canary_is_rolled_back_within_one_analysis_interval(
    cluster: Cluster, ns: str, signed: Signed, gateway: Gateway
) -> None:
    stable = start_stable(cluster, ns, signed)
    key = create_key(cluster, ns, "team")
    prom = PrometheusSignals(cluster.info["prometheus"])
    limits = analysis.Thresholds(
        min_samples=ANALYSIS["minSamples"],
        max_ttft_p99_ratio=10,
        max_inter_token_p99_ratio=10,
        max_error_rate=0.05,
    )
    # the canary's engines answer their first token ~40x later than stable's
    steps = [{"weight": 34, "holdSeconds": 60}]
    with Traffic(gateway, key, served(ns)):
        cluster.apply(model(ns, signed, sim=SLOW, engine=CANARY_ENGINE, steps=steps))
        live = wait_for(
            "the canary taking traffic", lambda: phase_is(cluster, ns, "Progressing"), 120
        )
        canary = str(live["canaryRevision"])

        # Measure as the operator does, from outside, to time the breach becoming visible.
        def breached() -> float | None:
            got = [
                prom.canary_sample(ns, served(ns), name, window_seconds=WINDOW)
                for name in (canary, stable)
            ]
            if got[0] is None or got[1] is None:
                return None
            judged = analysis.judge(got[0], got[1], limits)
            if judged.outcome is Outcome.ANALYSIS_FAILED or phase_is(cluster, ns, "RolledBack"):
                return time.time()
            return None

        seen_at = wait_for("the breach measurable", breached, timeout=120, every=0.2)
        back = wait_for("the rollback", lambda: phase_is(cluster, ns, "RolledBack"), timeout=30)
    rolled = condition(back, "RolledBack")
    assert (rolled["status"], rolled["reason"]) == ("True", "AnalysisFailed"), rolled
    assert "TTFT" in rolled["message"]
    assert weights(back) == {stable: 100, canary: 0}
    assert "RolledBack" in events(cluster, ns)
    # lastTransitionTime has 1 s resolution; the analysis interval is 1 s, a pass takes ~1 s
    lag = stamp(rolled["lastTransitionTime"]) - seen_at
    since_traffic = stamp(rolled["lastTransitionTime"]) - stamp(live["rollout"]["stepStartedAt"])
    print(
        f"rollback {lag:+.1f} s after the breach was measurable from outside, "
        f"{since_traffic:.0f} s after the canary got traffic"
    )
    assert lag <= ANALYSIS["intervalSeconds"] + 2, lag
    wait_for("the canary's workers gone", lambda: ready_pods(cluster, ns) == {stable: 3}, 120)


def test_the_stable_revision_scales_with_the_pool_while_a_canary_is_stuck(
    cluster: Cluster, ns: str, signed: Signed, rollout_operator: Operator
) -> None:
    """A rollout can last hours (or sit blocked): the pool's scaling must not wait for it. The
    pool's floor doubles while the canary is blocked; the stable revision grows to it."""
    stable = start_stable(cluster, ns, signed)
    cluster.apply(model(ns, signed, key="other-key"))
    wait_for("the canary blocked", lambda: phase_is(cluster, ns, "Blocked"), timeout=120)
    cluster.kubectl(
        "patch",
        "tfpool",
        POOL,
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"replicas": {"min": 6, "max": 6}}}),
    )
    wait_for(
        "6 stable replicas ready",
        lambda: ready_pods(cluster, ns)[stable] == 6,
        timeout=120,
    )
    st = status(cluster, ns)
    assert (st["rollout"]["phase"], weights(st)[stable]) == ("Blocked", 100)
