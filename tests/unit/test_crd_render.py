"""The CRDs are rendered from the models: committed YAML must match, and be structural.

A drift between crds/ and tokenfleet.api fails here (run `make crds`). Structural means what the
API server demands: no $ref, no anyOf, a type on every node, a description on every field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.api import crd

REPO = Path(__file__).resolve().parents[2]
RENDERED = crd.render_files()


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_committed_crd_matches_the_models(name: str) -> None:
    committed = (REPO / "crds" / name).read_text()
    assert committed == RENDERED[name], f"crds/{name} is stale: run `make crds`"


def test_no_stray_files_in_crds() -> None:
    assert {p.name for p in (REPO / "crds").glob("*.yaml")} == set(RENDERED)


def _walk(node: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, child in node.get("properties", {}).items():
        out += _walk(child, f"{path}.{name}")
    if "items" in node:
        out += _walk(node["items"], f"{path}[]")
    return out


@pytest.mark.parametrize("kind", crd.KINDS, ids=lambda k: k.kind)
def test_schema_is_structural_and_documented(kind: crd.Kind) -> None:
    schema = crd.render(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema, kind.kind):
        assert "$ref" not in node and "anyOf" not in node, path
        assert "type" in node, f"{path} has no type"
        if path.count(".") >= 1 and not path.endswith(".metadata") and not path.endswith("[]"):
            assert node.get("description"), f"{path} has no description (kubectl explain)"


@pytest.mark.parametrize("kind", crd.KINDS, ids=lambda k: k.kind)
def test_every_kind_has_status_subresource_columns_and_short_names(kind: crd.Kind) -> None:
    doc = crd.render(kind)
    version = doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert any(c["name"] == "Age" for c in version["additionalPrinterColumns"])
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"observedGeneration", "conditions"} <= set(status)
    names = doc["spec"]["names"]
    assert names["shortNames"] and "infpool" not in names["shortNames"]
    assert "tokenfleet" in names["categories"]


def test_crd_yaml_parses_as_one_document_each() -> None:
    for name, text in RENDERED.items():
        docs = list(yaml.safe_load_all(text))
        assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition", name


def test_check_mode_reports_stale_files(tmp_path: Path) -> None:
    assert crd.main(["--write", str(tmp_path)]) == 0
    assert crd.main(["--check", str(tmp_path)]) == 0
    (tmp_path / sorted(RENDERED)[0]).write_text("stale")
    assert crd.main(["--check", str(tmp_path)]) == 1


def test_a_preview_gets_no_defaults_from_the_api_server() -> None:
    """autoscaling.preview overrides only the fields it sets: a default the API server filled in
    would override the active policy's value with the default."""
    pools = next(k for k in crd.KINDS if k.kind == "InferencePool")
    auto = crd.openapi_schema(pools)["properties"]["spec"]["properties"]["autoscaling"]
    preview = auto["properties"]["preview"]

    def defaults(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [k for k in node if k == "default"] + [
                d for v in node.values() for d in defaults(v)
            ]
        return [d for v in node for d in defaults(v)] if isinstance(node, list) else []

    assert preview["properties"]["targetKvCacheUsage"]["type"] == "number"
    assert not defaults(preview), preview
    assert crd.OVERRIDES not in preview
    assert auto["properties"]["targetKvCacheUsage"]["default"] == 0.8  # the active keeps them
