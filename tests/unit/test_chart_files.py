"""Static checks of charts/tokenfleet: its CRDs are the repository's, byte for byte, and every
field of values.yaml is documented (a comment above it; deeper keys belong to a documented
structure)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tokenfleet"


def test_the_charts_crds_are_the_repositorys() -> None:
    ours = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    assert ours and sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == ours
    for name in ours:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes(), name


def undocumented(text: str) -> list[str]:
    """Keys at the top two levels of a values file without a comment on the line above (or
    on the line itself); deeper keys are parts of a documented structure (resources, probes)."""
    missing = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^( {0,2})([A-Za-z][\w.-]*):", line)
        if match and not (i and lines[i - 1].lstrip().startswith("#")) and "#" not in line:
            missing.append(match.group(2))
    return missing


@pytest.mark.parametrize("values", ["values.yaml"])
def test_every_value_is_documented(values: str) -> None:
    assert undocumented((CHART / values).read_text()) == []


def test_the_documentation_check_finds_an_undocumented_key() -> None:
    assert undocumented("# ok\na: 1\nb:\n  c: 2\n") == ["b", "c"]
    assert undocumented("# block\nb:\n  # c\n  c:\n    d: 2\n") == []
