"""The route classifier: hashed n-gram features, scoring, the weights document, and training.

Matrix: the buckets are crc32 of lower-cased words and of adjacent word pairs (punctuation
splits, non-ASCII letters stay, text past MAX_CHARS is not read); scores stay in [0, 1] with
no overflow; the weights document round-trips and every malformed one is refused with a reason;
training is deterministic, holds out whole groups independently of file order, learns a
separable set, and its precision/recall are the textbook ones; the CLI shell refuses bad lines
by number and writes the same bytes twice; the shipped example ConfigMap is exactly what the
documented command writes from the shipped prompts, which the documented script writes.
"""

from __future__ import annotations

import json
import math
import runpy
import zlib
from pathlib import Path

import pytest
import yaml

from tokenfleet.gateway import route_training
from tokenfleet.gateway.policy import classifier
from tokenfleet.gateway.policy import classifier_training as training

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples/09-model-routes"
crc = zlib.crc32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", [], id="empty"),
        pytest.param("Hello", [crc(b"hello")], id="one-word-lower-cased"),
        pytest.param(
            "hello, World!", [crc(b"hello"), crc(b"world"), crc(b"helloworld")], id="bigram"
        ),
        pytest.param(
            "a\tb\nc",
            [crc(b"a"), crc(b"b"), crc(b"c"), crc(b"ab"), crc(b"bc")],
            id="whitespace-splits",
        ),
        pytest.param("café", [crc("café".encode())], id="non-ascii-stays-in-word"),
        pytest.param(
            "x" * (classifier.MAX_CHARS + 5) + " tail",
            [crc(b"x" * classifier.MAX_CHARS)],
            id="read-up-to-max-chars",
        ),
    ],
)
def test_buckets(text: str, expected: list[int]) -> None:
    assert classifier.buckets(text) == expected


MODEL = classifier.HashedNgrams(bias=-1.0, weights={crc(b"prove"): 3.0, crc(b"hello"): -2.0})


def test_score_is_the_logistic_of_bias_plus_scaled_weights() -> None:
    # "prove it": buckets prove, it, proveit: (3 + 0 + 0) / sqrt(3)
    assert MODEL.score("Prove it") == pytest.approx(classifier.sigmoid(-1 + 3 / math.sqrt(3)))
    assert MODEL.score("") == pytest.approx(classifier.sigmoid(-1.0))
    assert MODEL.score("prove") > 0.5 > MODEL.score("hello")


def test_extreme_weights_saturate_without_overflow() -> None:
    huge = classifier.HashedNgrams(bias=0.0, weights={crc(b"a"): 1e9, crc(b"b"): -1e9})
    assert huge.score("a") == pytest.approx(1.0) and huge.score("b") == pytest.approx(0.0)


def test_the_model_is_a_classifier() -> None:
    seam: classifier.Classifier = MODEL  # the Protocol is the seam routes score through
    assert 0.0 <= seam.score("anything") <= 1.0


def test_document_round_trips_and_ignores_about() -> None:
    text = classifier.document(MODEL, about={"heldOut": "held out: 1 prompts"})
    assert "\n" not in text
    assert classifier.parse(text) == MODEL


def _doc(**changed: object) -> str:
    doc = json.loads(classifier.document(MODEL))
    doc.update(changed)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("{", "not JSON", id="not-json"),
        pytest.param("[]", "must be a JSON object", id="not-an-object"),
        pytest.param(_doc(format="other"), "format must be", id="other-format"),
        pytest.param(_doc(version=2), "format must be", id="newer-version"),
        pytest.param(_doc(bias=True), "bias must be a number", id="bias-bool"),
        pytest.param(_doc(weights=[1, 2]), "weights must be an object", id="weights-list"),
        pytest.param(_doc(weights={"a": 1.0}), "bucket numbers", id="bucket-not-a-number"),
        pytest.param(_doc(weights={"1": "x"}), "bucket numbers", id="weight-not-a-number"),
        pytest.param(_doc(weights={str(1 << 32): 1.0}), "not a crc32", id="bucket-too-large"),
        pytest.param(_doc(weights={"1": float("nan")}), "finite", id="nan-weight"),
    ],
)
def test_malformed_documents_are_refused(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        classifier.parse(text)


def _toy(n: int = 40) -> list[training.Example]:
    hard = [f"prove theorem {i} rigorously by induction" for i in range(n)]
    easy = [f"say hello to friend number {i}" for i in range(n)]
    return [
        *(training.Example(text=t, hard=True, group=f"h{i % 8}") for i, t in enumerate(hard)),
        *(training.Example(text=t, hard=False, group=f"e{i % 8}") for i, t in enumerate(easy)),
    ]


def test_training_is_deterministic_and_learns_a_separable_set() -> None:
    settings = training.Settings(seed=3, epochs=10)
    first, again = training.train(_toy(), settings), training.train(_toy(), settings)
    assert classifier.document(first.model) == classifier.document(again.model)
    assert first.held_out.accuracy == 1.0 and first.held_out.prompts > 0
    assert training.measure(first.model, _toy()).accuracy == 1.0


def test_split_holds_out_whole_groups_whatever_the_order() -> None:
    train, held = training.split(_toy(), seed=1, held_out_percent=30)
    assert not {e.group for e in train} & {e.group for e in held}
    shuffled = list(reversed(_toy()))
    assert sorted(map(str, training.split(shuffled, seed=1, held_out_percent=30)[1])) == sorted(
        map(str, held)
    )
    assert training.split(_toy(), seed=1, held_out_percent=0)[1] == []


class Always:
    def __init__(self, value: float) -> None:
        self.value = value

    def score(self, text: str) -> float:
        return self.value


def test_measure_counts_hard_as_the_positive_class() -> None:
    examples = _toy(3)  # 3 hard, 3 easy
    says_hard = training.measure(Always(0.9), examples)
    assert (says_hard.accuracy, says_hard.precision, says_hard.recall) == (0.5, 0.5, 1.0)
    says_easy = training.measure(Always(0.1), examples)
    assert (says_easy.precision, says_easy.recall) == (0.0, 0.0)  # undefined precision: 0
    assert says_easy.line() == (
        "held out: 6 prompts, accuracy 0.500, precision 0.000, recall 0.000"
    )


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        pytest.param("not json", ":1: want", id="not-json"),
        pytest.param('{"text": "a"}', ":1: want", id="no-label"),
        pytest.param('{"text": "a", "label": "medium"}', "label easy or hard", id="bad-label"),
        pytest.param('{"text": 3, "label": "easy"}', "must be strings", id="text-not-a-string"),
    ],
)
def test_the_trainer_refuses_bad_lines_by_number(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=reason):
        route_training.read(path)


def test_the_trainer_writes_weights_or_a_configmap(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps({"text": e.text, "label": "hard" if e.hard else "easy"}) for e in _toy()
        )
    )
    out, cm = tmp_path / "w.json", tmp_path / "cm.yaml"
    assert route_training.main([str(prompts), "-o", str(out), "--epochs", "5"]) == 0
    assert (
        route_training.main([str(prompts), "-o", str(cm), "--epochs", "5", "--configmap", "x"]) == 0
    )
    doc = yaml.safe_load(cm.read_text())
    assert doc["metadata"]["name"] == "x"
    assert doc["metadata"]["labels"] == {"tokenfleet.io/route-classifier": "true"}  # the watch
    assert classifier.parse(doc["data"]["weights.json"]) == classifier.parse(out.read_text())
    assert route_training.main([str(tmp_path / "absent.jsonl"), "-o", str(out)]) == 2


def test_the_shipped_prompts_are_what_the_documented_script_writes() -> None:
    script = runpy.run_path(str(EXAMPLE / "make_prompts.py"))
    written = [json.dumps(row, ensure_ascii=False) for row in script["prompts"]()]
    assert (EXAMPLE / "prompts.jsonl").read_text().splitlines() == written
    labels = [row["label"] for row in script["prompts"]()]
    assert labels.count("easy") == labels.count("hard") == 200


def test_the_shipped_configmap_is_what_the_documented_command_writes(tmp_path: Path) -> None:
    out = tmp_path / "cm.yaml"
    argv = [str(EXAMPLE / "prompts.jsonl"), "-o", str(out), "--configmap", "chat-auto-classifier"]
    assert route_training.main(argv) == 0
    assert out.read_text() == (EXAMPLE / "classifier-configmap.yaml").read_text()
