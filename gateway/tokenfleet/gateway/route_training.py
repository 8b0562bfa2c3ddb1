"""``tokenfleet route train-classifier``: train a ModelRoute's prompt classifier from a file.

    tokenfleet route train-classifier PROMPTS.jsonl -o weights.json [--seed 0] [--epochs 30]
    tokenfleet route train-classifier PROMPTS.jsonl -o cm.yaml --configmap NAME

Each line of PROMPTS.jsonl is ``{"text": "...", "label": "easy" | "hard"}``, optionally with a
``"group"`` (a template, a conversation, a user: prompts of a group are held out together, so
near-duplicates do not flatter the figures). A fifth of the prompts (chosen by the seed) is
held out and measured; the command prints the held-out accuracy,
precision and recall, and writes the weights document (or a ConfigMap holding it under
``weights.json``, the key a ModelRoute's ``spec.classifier`` names by default). The same file
and seed write the same bytes. The shell reads and writes files; training is
:mod:`tokenfleet.gateway.policy.classifier_training`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenfleet.api import labels
from tokenfleet.gateway.policy import classifier
from tokenfleet.gateway.policy import classifier_training as training

LABELS = {"easy": False, "hard": True}
KEY = "weights.json"


def read(path: Path) -> list[training.Example]:
    """The labelled prompts of a JSONL file; ValueError names the first bad line."""
    examples = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text, label = row["text"], row["label"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f'{path}:{number}: want {{"text": ..., "label": ...}}') from exc
        group = row.get("group", "")
        if not isinstance(text, str) or label not in LABELS or not isinstance(group, str):
            raise ValueError(f"{path}:{number}: text and group must be strings, label easy or hard")
        examples.append(training.Example(text=text, hard=LABELS[label], group=group))
    return examples


def configmap(name: str, weights: str) -> str:
    """A ConfigMap manifest holding the weights document (one line of JSON) as a literal
    block, so that a reader sees the JSON as the gateway will; labelled for the gateways'
    watch (they read only ConfigMaps with tokenfleet.io/route-classifier=true)."""
    if "\n" in weights:
        raise ValueError("the weights document must be one line")
    return (
        "# Written by `tokenfleet route train-classifier`: retrain rather than edit.\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        f'  name: {json.dumps(name)}\n  labels:\n    {labels.ROUTE_CLASSIFIER}: "true"\n'
        f"data:\n  {KEY}: |\n    {weights}\n"
    )


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tokenfleet route train-classifier")
    parser.add_argument("prompts", type=Path, help='JSONL: {"text": ..., "label": easy|hard}')
    parser.add_argument("-o", "--output", type=Path, required=True, help="file to write")
    parser.add_argument("--configmap", metavar="NAME", help="write a ConfigMap of this name")
    defaults = training.Settings()
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--held-out", type=int, default=defaults.held_out_percent)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Read, train, report, write."""
    args = _arguments(argv)
    try:
        examples = read(args.prompts)
    except (OSError, ValueError) as exc:
        print(f"tokenfleet route train-classifier: {exc}", file=sys.stderr)
        return 2
    settings = training.Settings(seed=args.seed, epochs=args.epochs, held_out_percent=args.held_out)
    trained = training.train(examples, settings)
    about = {
        "trainedOn": trained.trained_on,
        "seed": settings.seed,
        "epochs": settings.epochs,
        "heldOut": trained.held_out.line(),
    }
    weights = classifier.document(trained.model, about=about)
    args.output.write_text(configmap(args.configmap, weights) if args.configmap else weights + "\n")
    print(f"trained on {trained.trained_on} prompts: {len(trained.model.weights)} weights")
    print(trained.held_out.line())
    print(f"wrote {args.output}")
    return 0
