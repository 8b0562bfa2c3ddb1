"""Render the CustomResourceDefinitions from the API models: the one source of truth.

pydantic's JSON schema is close to what the API server wants, but a *structural* schema needs
every ``$ref`` inlined, ``Optional`` as "absent" rather than ``anyOf null``, OpenAPI 3.0's
boolean ``exclusiveMinimum``, and a ``{}`` default on nested objects so that the API server fills
their own defaults. This module does exactly that and nothing else; run
``python -m tokenfleet.api.crd --write crds/`` after changing a model.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema, to_jsonable_python

from tokenfleet.api import base
from tokenfleet.api.adapter import ModelAdapter
from tokenfleet.api.deployment import ModelDeployment
from tokenfleet.api.pool import InferencePool
from tokenfleet.api.route import ModelRoute
from tokenfleet.api.tenant import Tenant

Schema = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One `kubectl get` printer column."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """Everything that names and shows one custom resource."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    model: type[BaseModel]
    columns: tuple[Column, ...]

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{base.API_GROUP}"


def _ready(name: str = "Ready") -> Column:
    return Column(
        name=name,
        json_path=f'.status.conditions[?(@.type=="{name}")].status',
        description=f"The {name} condition.",
    )


def _age() -> Column:
    return Column(name="Age", json_path=".metadata.creationTimestamp", type="date")


KINDS: tuple[Kind, ...] = (
    Kind(
        kind="InferencePool",
        plural="inferencepools",
        # Not "infpool": the Gateway API Inference Extension owns that short name.
        short_names=("tfpool", "tfpools"),
        model=InferencePool,
        columns=(
            Column(name="GPU", json_path=".spec.accelerator.product", description="GPU product."),
            Column(name="Min", json_path=".spec.replicas.min", type="integer"),
            Column(name="Max", json_path=".spec.replicas.max", type="integer"),
            Column(name="Desired", json_path=".status.replicas", type="integer"),
            Column(name="Ready", json_path=".status.readyReplicas", type="integer"),
            _ready("Degraded"),
            Column(
                name="Reason",
                json_path=".status.lastScaling.reason",
                description="Why the pool has its current size.",
            ),
            # last: the columns before it keep the places scripts may read them at
            Column(
                name="Device", json_path=".spec.accelerator.kind", description="GPU or CPU nodes."
            ),
            _age(),
        ),
    ),
    Kind(
        kind="ModelDeployment",
        plural="modeldeployments",
        short_names=("tfmodel", "tfmodels"),
        model=ModelDeployment,
        columns=(
            Column(name="Model", json_path=".spec.model.name", description="Served model name."),
            Column(name="Pools", json_path=".spec.pools", description="Pools it runs on."),
            Column(name="Phase", json_path=".status.phase"),
            Column(name="Stable", json_path=".status.stableRevision"),
            Column(name="Canary", json_path=".status.canaryRevision"),
            Column(
                name="Rollout",
                json_path=".status.rollout.phase",
                description="Verifying, Progressing, Paused, Promoted, RolledBack or Blocked.",
            ),
            Column(
                name="Step",
                json_path=".status.canaryStep",
                type="integer",
                description="Index of the current canary step.",
                priority=1,
            ),
            _ready("Verified"),
            _age(),
        ),
    ),
    Kind(
        kind="ModelAdapter",
        plural="modeladapters",
        short_names=("tfadapter", "tfadapters"),
        model=ModelAdapter,
        columns=(
            Column(name="Name", json_path=".spec.servedName", description="Served adapter name."),
            Column(name="Base", json_path=".spec.base", description="Base ModelDeployment."),
            _ready("Verified"),
            Column(
                name="Reason",
                json_path=".status.reason",
                description="Verification verdict.",
            ),
            Column(
                name="Loaded",
                json_path=".status.loadedReplicas",
                type="integer",
                description="Replicas that have it loaded now.",
            ),
            Column(
                name="Requests",
                json_path=".status.requestsServed",
                type="integer",
                description="Requests served with it.",
            ),
            _age(),
        ),
    ),
    Kind(
        kind="ModelRoute",
        plural="modelroutes",
        short_names=("tfroute", "tfroutes"),
        model=ModelRoute,
        columns=(
            Column(name="Model", json_path=".spec.name", description="Public model name."),
            Column(
                name="Default",
                json_path=".spec.defaultTargets[*].model",
                description="Where requests that match no rule go.",
            ),
            Column(
                name="Targets",
                json_path=".spec.rules[*].targets[*].model",
                description="The rules' target models, in rule order.",
                priority=1,
            ),
            _ready(),
            Column(
                name="Remotes",
                json_path=".spec.remotes[*].name",
                description="Where requests the local targets refuse spill, in order.",
                priority=1,
            ),
            Column(
                name="RemotesReady",
                json_path='.status.conditions[?(@.type=="RemotesReady")].status',
                description="Every remote's key Secret and key exist in the gateway's namespace.",
                priority=1,
            ),
            _age(),
        ),
    ),
    Kind(
        kind="Tenant",
        plural="tenants",
        short_names=("tftenant", "tftenants"),
        model=Tenant,
        columns=(
            Column(name="Class", json_path=".spec.priorityClass", description="Admission class."),
            Column(name="Keys", json_path=".status.keyCount", type="integer"),
            Column(name="TPM", json_path=".spec.quotas.tokensPerMinute", type="integer"),
            Column(
                name="Budget",
                json_path=".status.budget.state",
                description="WithinBudget or Exhausted (spec.budget).",
            ),
            Column(
                name="Spent",
                json_path=".status.budget.spent",
                description="Spent of the budget this period.",
            ),
            Column(
                name="Cost",
                json_path=".status.usage.cost",
                description="Cost this period at the pools' per-token prices.",
            ),
            Column(name="Models", json_path=".spec.allowedModels", priority=1),
            Column(
                name="Last-Used",
                json_path=".status.lastUsed",
                type="date",
                description="When the tenant was last served.",
                priority=1,
            ),
            _ready(),
            _age(),
        ),
    ),
)


class _KubeSchema(GenerateJsonSchema):
    """pydantic's generator, but defaults made by factories are emitted too."""

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        factory = schema.get("default_factory")
        if factory is None:
            return super().default_schema(schema)
        inner = self.generate_inner(schema["schema"])
        value = factory()  # type: ignore[call-arg]
        # The complete default, not {}: the API server checks a default against the CEL rules
        # without filling nested defaults first. Lists and maps default to their (possibly
        # empty) value so that CEL may call size() on them without has() guards.
        return {**inner, "default": to_jsonable_python(value, by_alias=True, exclude_none=True)}


def _flatten(node: Schema, defs: Schema, path: str) -> Schema:
    """Collapse ``Optional[X]`` to X and inline X's ``$ref``, keeping the field's own keys."""
    if "anyOf" in node:
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"{path}: only Optional[X] unions are structural")
        node = {**branches[0], **node}
        if node.get("default", 0) is None:
            del node["default"]  # "absent" is how Kubernetes spells None
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        rules = [
            *target.get("x-kubernetes-validations", []),
            *node.get("x-kubernetes-validations", []),
        ]
        node = {**target, **node}
        if rules:
            node["x-kubernetes-validations"] = rules
    node.pop("title", None)
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node and not isinstance(node[bound], bool):  # JSON Schema → OpenAPI 3.0
            node[plain] = node.pop(bound)
            node[bound] = True
    return node


def _structural(node: Any, defs: Schema, path: str) -> Any:
    """Inline refs, collapse Optional, drop titles, convert to OpenAPI 3.0 spellings."""
    if isinstance(node, list):
        return [_structural(item, defs, path) for item in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in _flatten(dict(node), defs, path).items():
        if key == "properties":
            out[key] = {name: _structural(v, defs, f"{path}.{name}") for name, v in value.items()}
            undocumented = [name for name, prop in out[key].items() if not prop.get("description")]
            if undocumented:
                raise ValueError(f"{path}: fields without a description: {undocumented}")
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs, f"{path}[]")
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out:
        out.pop("additionalProperties", None)
    if out.pop(OVERRIDES, False):
        out = _without_defaults(out)
    return out


#: A field's schema key: its object only overrides fields set elsewhere, so the API server must
#: fill no defaults into it (a defaulted field would override with the default).
OVERRIDES = "x-tokenfleet-overrides"


def _without_defaults(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_defaults(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {k: _without_defaults(v) for k, v in node.items() if k != "default"}


def openapi_schema(kind: Kind) -> Schema:
    """The structural openAPIV3Schema of one kind."""
    raw = kind.model.model_json_schema(by_alias=True, schema_generator=_KubeSchema)
    body: Schema = _structural(
        {k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {}), ""
    )
    body["properties"] = {
        "apiVersion": {"type": "string", "description": base.API_GROUP_VERSION},
        "kind": {"type": "string", "description": kind.kind},
        # The API server allows nothing but the type here; kubectl explain shows ObjectMeta docs.
        "metadata": {"type": "object"},
        **body["properties"],
    }
    return body


def render(kind: Kind) -> Schema:
    """The CustomResourceDefinition of one kind."""
    columns = [
        {
            "name": c.name,
            "type": c.type,
            "jsonPath": c.json_path,
            **({"description": c.description} if c.description else {}),
            **({"priority": c.priority} if c.priority else {}),
        }
        for c in kind.columns
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.crd_name},
        "spec": {
            "group": base.API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": ["tokenfleet"],
            },
            "versions": [
                {
                    "name": base.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": openapi_schema(kind)},
                }
            ],
        },
    }


HEADER = "# Generated from tokenfleet.api by `make crds`. Do not edit.\n"


def render_files() -> dict[str, str]:
    """File name → YAML text for every kind."""
    return {
        f"{base.API_GROUP}_{k.plural}.yaml": HEADER
        + yaml.safe_dump(render(k), sort_keys=False, width=100)
        for k in KINDS
    }


def main(argv: list[str]) -> int:
    """``--write DIR`` rewrites the CRD files; ``--check DIR`` fails if they are stale."""
    if len(argv) != 2 or argv[0] not in ("--write", "--check"):
        print("usage: python -m tokenfleet.api.crd --write|--check DIR", file=sys.stderr)
        return 2
    folder = Path(argv[1])
    stale = [
        n
        for n, text in render_files().items()
        if (folder / n).is_file() is False or (folder / n).read_text() != text
    ]
    if argv[0] == "--check":
        for name in stale:
            print(
                f"{folder / name} is stale: run python -m tokenfleet.api.crd --write {folder}",
                file=sys.stderr,
            )
        return 1 if stale else 0
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in render_files().items():
        (folder / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
