"""A refused revision verifies again when its trust changes (pure): the decision (refused? ×
fingerprint recorded × fingerprint now), the fingerprint of a trust policy, when the loop must
read the Secret at all, which pods' refusals go stale, what each refusal tells the user to fix;
then passes through the ModelDeployment planner: a blocked canary and a blocked first revision
whose Secret is fixed verify again and serve, an unchanged or unreadable Secret changes nothing,
and a refusal recorded before fingerprints existed is checked once."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from typing import Any

import pytest

from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus, TrustPolicy
from tokenfleet.operator.plan import desired, model_status, observed, verification
from tokenfleet.operator.policy import reverify
from tokenfleet.operator.policy.reverify import Why
from tokenfleet.signing.verdict import Reason, Verdict

OLD, NEW = "sha256:" + "0" * 64, "sha256:" + "1" * 64


@pytest.mark.parametrize(
    ("refused", "recorded", "current", "reverify_", "fingerprint", "why"),
    [
        pytest.param(False, OLD, NEW, False, OLD, Why.NOT_REFUSED, id="verified-key-rotated"),
        pytest.param(False, "", NEW, False, NEW, Why.NOT_REFUSED, id="new-records-baseline"),
        pytest.param(False, "", None, False, "", Why.NOT_REFUSED, id="new-unread"),
        pytest.param(True, OLD, None, False, OLD, Why.TRUST_UNKNOWN, id="refused-unreadable"),
        pytest.param(True, OLD, OLD, False, OLD, Why.TRUST_UNCHANGED, id="refused-same-key"),
        pytest.param(True, OLD, NEW, True, NEW, Why.TRUST_CHANGED, id="refused-key-replaced"),
        pytest.param(True, OLD, "absent", True, "absent", Why.TRUST_CHANGED, id="secret-gone"),
        pytest.param(True, "absent", NEW, True, NEW, Why.TRUST_CHANGED, id="secret-created"),
        pytest.param(True, "", OLD, True, OLD, Why.NO_FINGERPRINT, id="refused-before-upgrade"),
    ],
)
def test_decide(
    refused: bool,
    recorded: str,
    current: str | None,
    reverify_: bool,
    fingerprint: str,
    why: Why,
) -> None:
    decision = reverify.decide(refused=refused, recorded=recorded, current=current)
    assert decision == reverify.Decision(reverify=reverify_, fingerprint=fingerprint, why=why)
    if decision.reverify:  # what it records, checked again, changes nothing more
        again = reverify.decide(refused=True, recorded=decision.fingerprint, current=current)
        assert not again.reverify


KEY_TRUST = TrustPolicy.model_validate({"publicKey": {"name": "model-signing-key"}})
SIGSTORE_TRUST = TrustPolicy.model_validate(
    {"sigstore": {"identity": "ci@example.com", "issuer": "https://issuer.example"}}
)


@pytest.mark.parametrize(
    ("trust", "key", "expected"),
    [
        pytest.param(KEY_TRUST, b"pem", "sha256:" + hashlib.sha256(b"pem").hexdigest(), id="key"),
        pytest.param(KEY_TRUST, None, "absent", id="missing-secret-or-key"),
        pytest.param(SIGSTORE_TRUST, None, "sigstore", id="sigstore"),
        pytest.param(SIGSTORE_TRUST, b"pem", "sigstore", id="sigstore-ignores-secrets"),
    ],
)
def test_fingerprint(trust: TrustPolicy, key: bytes | None, expected: str) -> None:
    assert verification.fingerprint(trust, key) == expected


DIGEST = "sha256:" + "b" * 64
STABLE_DIGEST = "sha256:" + "a" * 64
NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
ZONES = ("zone-a", "zone-b", "zone-c")


def spec(digest: str = DIGEST, trust: TrustPolicy = KEY_TRUST) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "model": {"name": "m"},
            "pools": ["p"],
            "artifact": {"uri": "file:///m", "digest": digest, "trust": trust.to_wire()},
            "rollout": {"steps": [{"weight": 10, "holdSeconds": 5}]},
        }
    )


CANARY = desired.revision_of(spec())
STABLE = desired.revision_of(spec(STABLE_DIGEST))


def entry(**fields: Any) -> dict[str, Any]:
    return {"name": CANARY, "digest": DIGEST, **fields}


def with_revisions(*entries: dict[str, Any]) -> ModelDeploymentStatus:
    return ModelDeploymentStatus.model_validate({"revisions": list(entries)})


REFUSED = entry(verified=False, reason="UntrustedSigner", trustFingerprint=OLD)


@pytest.mark.parametrize(
    ("model", "status", "expected"),
    [
        pytest.param(spec(), None, True, id="new-deployment"),
        pytest.param(spec(), with_revisions(), True, id="new-revision"),
        pytest.param(spec(), with_revisions(REFUSED), True, id="refused"),
        pytest.param(
            spec(), with_revisions(entry(verified=True, reason="Verified")), False, id="verified"
        ),
        pytest.param(spec(), with_revisions(entry()), False, id="verifying"),
        pytest.param(spec(trust=SIGSTORE_TRUST), None, False, id="sigstore-nothing-to-read"),
    ],
)
def test_the_secret_is_read_only_while_it_matters(
    model: ModelDeploymentSpec, status: ModelDeploymentStatus | None, expected: bool
) -> None:
    assert verification.needs_trust(model, status) is expected


def _verdict(seen: Reason, revision: str) -> str:
    """As the verify step records it: a pass names the digest it verified."""
    digest = {CANARY: DIGEST, STABLE: STABLE_DIGEST}.get(revision, "")
    return Verdict(reason=seen, digest=digest).to_json()


def worker(
    name: str,
    *,
    revision: str = CANARY,
    seen: Reason | None = Reason.UNTRUSTED_SIGNER,
    ready: bool = False,
    terminating: bool = False,
    trust: str = "",
) -> observed.WorkerPod:
    return observed.WorkerPod(
        name=name,
        zone=ZONES[0],
        revision=revision,
        ready=ready,
        terminating=terminating,
        unschedulable_since=None,
        verdict="" if seen is None else _verdict(seen, revision),
        trust=trust,
    )


def worker_set(name: str, revision: str = CANARY) -> observed.WorkerSet:
    return observed.WorkerSet(
        name=name, zone=ZONES[0], revision=revision, replicas=1, applied_hash="h"
    )


SETS = [worker_set("p-zone-b-canary"), worker_set("p-zone-a-canary"), worker_set("s", STABLE)]


def test_a_reverification_restarts_the_revisions_workers_and_sets_its_refusals_aside() -> None:
    pods = [
        worker("refused"),
        worker("refused-too", seen=Reason.SIGNATURE_INVALID),
        worker("going", terminating=True),
        worker("no-verdict-yet", seen=None),
        worker("verified", seen=Reason.VERIFIED, ready=True),
        worker("stable-refused", revision=STABLE),
    ]
    recheck = verification.plan(
        namespace="ns",
        spec=spec(),
        status=with_revisions(REFUSED),
        pods=pods,
        sets=SETS,
        current=NEW,
    )
    assert recheck.decision.reverify and recheck.revision == CANARY
    assert recheck.restart == ("p-zone-a-canary", "p-zone-b-canary")
    assert recheck.stale == ("refused", "refused-too")
    assert recheck.detail == "trust Secret ns/model-signing-key changed"
    seen = recheck.observation()
    assert seen is not None and (seen.outcome, seen.revision) == ("TrustChanged", CANARY)


@pytest.mark.parametrize(
    "current", [pytest.param(OLD, id="unchanged"), pytest.param(None, id="unreadable")]
)
def test_nothing_goes_stale_while_the_trust_stands(current: str | None) -> None:
    recheck = verification.plan(
        namespace="ns",
        spec=spec(),
        status=with_revisions(REFUSED),
        pods=[worker("refused")],
        sets=SETS,
        current=current,
    )
    assert not recheck.decision.reverify
    assert recheck.restart == recheck.stale == () and recheck.observation() is None


@pytest.mark.parametrize(
    ("pods", "stale"),
    [
        pytest.param(
            [worker("old"), worker("new", seen=None, trust=NEW)], ("old",), id="replacement-up"
        ),
        pytest.param([worker("old")], (), id="no-replacement-yet"),
        pytest.param(
            [worker("old", trust=OLD), worker("new", trust=NEW)],
            ("old",),
            id="an-earlier-restart",
        ),
        pytest.param(
            [worker("new", trust=NEW), worker("newer", trust=NEW)],
            (),
            id="refused-again-counts",
        ),
        pytest.param(
            [worker("ok", seen=Reason.VERIFIED, ready=True), worker("new", seen=None, trust=NEW)],
            (),
            id="a-verified-pod-is-not-stale",
        ),
    ],
)
def test_refusals_from_before_the_restart_stay_aside_across_operator_restarts(
    pods: list[observed.WorkerPod], stale: tuple[str, ...]
) -> None:
    """Status records the fingerprint the restart was for; the pods carry it from their
    template, so a new operator process tells the lingering refused pods from the new ones."""
    restarted = with_revisions(entry(verified=False, reason="", trustFingerprint=NEW))
    recheck = verification.plan(
        namespace="ns", spec=spec(), status=restarted, pods=pods, sets=SETS, current=None
    )
    assert recheck.stale == stale


@pytest.mark.parametrize(
    ("reason", "trust", "current", "expected"),
    [
        pytest.param(
            "UntrustedSigner",
            KEY_TRUST,
            OLD,
            "signature not by a trusted key: the public key in Secret ns/model-signing-key does "
            "not match the signer; update the Secret (the operator re-verifies on change)",
            id="untrusted-key",
        ),
        pytest.param(
            "UntrustedSigner",
            KEY_TRUST,
            "absent",
            "the trust Secret ns/model-signing-key has no key 'public.pem'; create it (the "
            "operator re-verifies on change)",
            id="missing-secret",
        ),
        pytest.param(
            "UntrustedSigner",
            SIGSTORE_TRUST,
            "sigstore",
            "signature not by ci@example.com (https://issuer.example); sign with that identity "
            "or change spec.artifact.trust (a changed spec.artifact is a new revision, "
            "verified afresh)",
            id="untrusted-identity",
        ),
        pytest.param(
            "SignatureInvalid",
            KEY_TRUST,
            None,
            "the signature does not verify with the public key in Secret ns/model-signing-key; "
            "update the Secret if it holds another key (the operator re-verifies on change), or "
            "re-sign the files (a changed spec.artifact is a new revision, verified afresh)",
            id="bad-signature-key",
        ),
        pytest.param(
            "SignatureInvalid",
            SIGSTORE_TRUST,
            None,
            "the signature does not verify; re-sign the files (a changed spec.artifact is a new "
            "revision, verified afresh)",
            id="bad-signature-sigstore",
        ),
        pytest.param(
            "DigestMismatch",
            KEY_TRUST,
            None,
            "the files differ from what spec.artifact.digest pins; restore them, or pin the "
            "digest of the files that were signed (a changed spec.artifact is a new revision, "
            "verified afresh)",
            id="digest",
        ),
        pytest.param(
            "ArtifactUnreachable",
            KEY_TRUST,
            None,
            "the files or their signature could not be fetched from file:///m; make them "
            "reachable or fix spec.artifact (a changed spec.artifact is a new revision, "
            "verified afresh)",
            id="unreachable",
        ),
        pytest.param("Verified", KEY_TRUST, None, "", id="not-a-refusal"),
        pytest.param("TrustChanged", KEY_TRUST, None, "", id="not-a-verdict"),
    ],
)
def test_remedy(reason: str, trust: TrustPolicy, current: str | None, expected: str) -> None:
    got = verification.remedy(reason, namespace="ns", spec=spec(trust=trust), current=current)
    assert got == expected


# --- passes through the ModelDeployment planner ---------------------------------------------


@dataclasses.dataclass
class Pass:
    status: dict[str, Any]
    events: list[str]
    recheck: verification.Recheck

    @property
    def phase(self) -> str:
        return str(self.status["rollout"]["phase"])

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.status["conditions"] if c["type"] == kind)

    def revision(self, name: str) -> dict[str, Any]:
        return next(r for r in self.status["revisions"] if r["name"] == name)


def run(
    status: dict[str, Any],
    *,
    pods: list[observed.WorkerPod],
    trust: str | None,
    model: ModelDeploymentSpec | None = None,
    at: float = 0,
) -> Pass:
    """One pass as the loop runs it: the recheck first, then the planner with it."""
    model = model or spec()
    old = ModelDeploymentStatus.model_validate(status) if status else None
    recheck = verification.plan(
        namespace="ns", spec=model, status=old, pods=pods, sets=SETS, current=trust
    )
    got, events = model_status.plan_model(
        model_status.ModelInputs(
            namespace="ns",
            name="md",
            generation=1,
            spec=model,
            status=old,
            existing_pools=frozenset({"p"}),
            pool_owner={"p": "md"},
            pods=pods,
            now=NOW + datetime.timedelta(seconds=at),
            trust=trust,
            recheck=recheck,
        )
    )
    wire = json.loads(json.dumps(got.to_wire()))
    return Pass(status=wire, events=[e.reason for e in events], recheck=recheck)


VERIFIED = _verdict(Reason.VERIFIED, CANARY)
STABLE_PODS = [worker(f"s{i}", revision=STABLE, seen=Reason.VERIFIED, ready=True) for i in range(3)]


def blocked_canary() -> Pass:
    first = run({}, model=spec(STABLE_DIGEST), pods=STABLE_PODS, trust=OLD)
    assert first.phase == "Promoted"
    verifying = run(first.status, pods=STABLE_PODS, trust=OLD, at=1)
    assert verifying.phase == "Verifying"
    assert verifying.revision(CANARY)["trustFingerprint"] == OLD  # recorded before pods verify
    blocked = run(verifying.status, pods=[*STABLE_PODS, worker("c0")], trust=OLD, at=2)
    assert blocked.phase == "Blocked" and blocked.events == ["VerificationFailed"]
    return blocked


def test_a_blocked_canary_says_what_to_fix() -> None:
    blocked = blocked_canary()
    verified = blocked.condition("Verified")
    assert (verified["status"], verified["reason"]) == ("False", "UntrustedSigner")
    fix = (
        "signature not by a trusted key: the public key in Secret ns/model-signing-key does "
        "not match the signer; update the Secret (the operator re-verifies on change)"
    )
    assert verified["message"].endswith(fix), verified
    assert blocked.status["rollout"]["message"].endswith(fix)


def test_a_blocked_canary_verifies_again_once_its_secret_is_fixed_and_then_serves() -> None:
    blocked = blocked_canary()
    refused = [*STABLE_PODS, worker("c0")]
    # The Secret as it was: nothing moves, nothing is deleted, nothing more is said.
    same = run(blocked.status, pods=refused, trust=OLD, at=3)
    assert same.phase == "Blocked" and same.events == [] and same.recheck.stale == ()
    # The Secret now holds the signer's key: the refused pod goes, the canary verifies again.
    again = run(same.status, pods=refused, trust=NEW, at=4)
    assert again.recheck.restart == ("p-zone-a-canary", "p-zone-b-canary")
    assert again.recheck.stale == ("c0",)
    assert again.phase == "Verifying" and again.events == ["TrustChanged"]
    assert again.status["rollout"]["reason"] == "TrustChanged"
    assert "trust Secret ns/model-signing-key changed" in again.status["rollout"]["message"]
    canary_entry = again.revision(CANARY)
    assert (canary_entry["verified"], canary_entry["reason"]) == (False, "")
    assert canary_entry["trustFingerprint"] == NEW and canary_entry["weight"] == 0
    verified = again.condition("Verified")
    assert (verified["status"], verified["reason"]) == ("False", "Verifying")
    # The refused pod lingers beside its replacement, which is still verifying.
    starting = worker("c1", seen=None, trust=NEW)
    waiting = run(again.status, pods=[*refused, starting], trust=None, at=5)
    assert waiting.phase == "Verifying" and waiting.events == []
    assert waiting.recheck.stale == ("c0",)
    # The replacement verifies: the canary takes its first step (the refused pod goes).
    good = dataclasses.replace(starting, verdict=VERIFIED, ready=True)
    serving = run(waiting.status, pods=[*refused, good], trust=None, at=6)
    assert serving.phase == "Progressing" and serving.events == ["Verified"]
    assert serving.revision(CANARY)["weight"] == 10
    assert serving.condition("Verified")["status"] == "True"


def test_a_replacement_refused_again_blocks_again_without_a_loop() -> None:
    blocked = blocked_canary()
    again = run(blocked.status, pods=[*STABLE_PODS, worker("c0")], trust=NEW, at=4)
    replaced = [*STABLE_PODS, worker("c0"), worker("c1", trust=NEW)]
    still_wrong = run(again.status, pods=replaced, trust=NEW, at=6)
    assert still_wrong.phase == "Blocked" and still_wrong.events == ["VerificationFailed"]
    settled = run(still_wrong.status, pods=replaced, trust=NEW, at=7)
    assert settled.phase == "Blocked" and settled.events == []
    assert settled.recheck.restart == () and settled.recheck.stale == ("c0",)  # it lingers


def test_a_blocked_first_revision_is_promoted_once_its_secret_is_fixed() -> None:
    verifying = run({}, pods=[], trust="absent")
    assert verifying.revision(CANARY)["trustFingerprint"] == "absent"
    refused = [worker(f"c{i}") for i in range(3)]
    blocked = run(verifying.status, pods=refused, trust="absent", at=1)
    assert blocked.phase == "Blocked"
    assert "has no key 'public.pem'; create it" in blocked.condition("Verified")["message"]
    again = run(blocked.status, pods=refused, trust=NEW, at=2)
    assert again.recheck.stale == ("c0", "c1", "c2") and again.phase == "Verifying"
    good = [worker(f"d{i}", seen=Reason.VERIFIED, ready=True, trust=NEW) for i in range(3)]
    done = run(again.status, pods=good, trust=None, at=3)
    assert done.phase == "Promoted" and done.status["stableRevision"] == CANARY
    assert done.condition("Available")["status"] == "True"


def test_a_refusal_recorded_before_fingerprints_is_checked_once() -> None:
    blocked = blocked_canary()
    for revision in blocked.status["revisions"]:
        revision.pop("trustFingerprint")  # as an older operator wrote it
    refused = [*STABLE_PODS, worker("c0")]
    once = run(blocked.status, pods=refused, trust=OLD, at=3)
    assert once.recheck.decision.why is Why.NO_FINGERPRINT and once.phase == "Verifying"
    replaced = [*STABLE_PODS, worker("c1", trust=OLD)]
    after = run(once.status, pods=replaced, trust=OLD, at=4)
    assert after.phase == "Blocked"
    assert run(after.status, pods=replaced, trust=OLD, at=5).events == []


def test_a_verified_stable_is_never_restarted_by_a_rotated_key() -> None:
    first = run({}, model=spec(STABLE_DIGEST), pods=STABLE_PODS, trust=OLD)
    rotated = run(first.status, model=spec(STABLE_DIGEST), pods=STABLE_PODS, trust=NEW, at=1)
    assert rotated.recheck.restart == rotated.recheck.stale == () and rotated.events == []
    assert rotated.revision(STABLE)["trustFingerprint"] == OLD
