"""What every reconciler reads: kopf's indexes of actual state, and an object's last status."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import kopf
import pydantic

from tokenfleet.api.base import Model

Index = kopf.Index[Any, Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Indexes:
    pools: Index
    models: Index
    tenants: Index
    pods: Index
    sets: Index
    nodes: Index
    adapters: Index | None = None  # None: ModelAdapters are not watched (tests of the loop)
    routes: Index | None = None  # None: ModelRoutes are not watched (tests of the loop)


def items(index: Index, key: Any) -> list[Any]:
    return list(index.get(key, []))


def bodies(index: Index) -> Iterable[dict[str, Any]]:
    for key in list(index):
        yield from items(index, key)


S = TypeVar("S", bound=Model)


def status_of(model: type[S], body: Mapping[str, Any] | None) -> S | None:
    """An object's status as last written, parsed once here; unreadable status counts as none
    (the planners start over rather than stop)."""
    raw = (body or {}).get("status") or {}
    try:
        return model.model_validate(raw) if raw else None
    except pydantic.ValidationError:
        return None
