"""The operator's one list of Secrets per pass (key Secrets' metadata) stays inside the
namespaces it watches: with ``--namespace`` (the chart's ``watchNamespaces``) it lists each of
them, never ``/api/v1/secrets``, so a Role per namespace is enough; without, one cluster-wide
list as before. Both ask for metadata only, by label.
"""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.operator import k8s


class Recorded(k8s.Kube):
    """A client that answers every list with one Secret's metadata named after its path."""

    def __init__(self, *, namespaces: tuple[str, ...]) -> None:
        super().__init__(client=None, namespaces=namespaces)  # type: ignore[arg-type]
        self.asked: list[tuple[str, list[tuple[str, str]], str]] = []

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any,
        content_type: str,
        query: list[tuple[str, str]],
        accept: str = "application/json",
    ) -> Any:
        self.asked.append((path, query, accept))
        return {"items": [{"metadata": {"name": path}, "data": {"k": "secret"}}]}


@pytest.mark.parametrize(
    ("namespaces", "paths"),
    [
        pytest.param((), ["/api/v1/secrets"], id="cluster-wide"),
        pytest.param(
            ("team-a", "team-b"),
            ["/api/v1/namespaces/team-a/secrets", "/api/v1/namespaces/team-b/secrets"],
            id="watched-namespaces",
        ),
    ],
)
def test_key_secret_metadata_is_listed_where_the_operator_watches(
    namespaces: tuple[str, ...], paths: list[str]
) -> None:
    kube = Recorded(namespaces=namespaces)
    found = kube.key_secret_metadata()
    assert [a[0] for a in kube.asked] == paths
    assert all(q == [("labelSelector", f"{labels.API_KEY_SECRET}=true")] for _, q, _ in kube.asked)
    assert all(accept == k8s.METADATA_LIST for _, _, accept in kube.asked)
    assert [m["name"] for m in found] == paths  # metadata only: no data reaches the caller
