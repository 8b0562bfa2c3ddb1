"""Shared model base and the standard status vocabulary (conditions, observedGeneration, times).

The API group and version are spelled here and nowhere else: the CRD renderer, the operator's
API calls and kopf registrations, and every other part build on these constants.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

API_GROUP = "tokenfleet.io"
API_VERSION = "v1alpha1"
#: ``apiVersion`` of every TokenFleet object, and the middle of its REST path
#: (``/apis/{API_GROUP_VERSION}/namespaces/...``).
API_GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"

#: One Kubernetes name segment (RFC 1123 label): what a human may type for names we look up.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

#: A namespace that ``sharedWith`` names, or ``*`` for every namespace.
SHARED_NAMESPACE = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"

SharedNamespace = Annotated[str, Field(pattern=SHARED_NAMESPACE, max_length=63)]

SHARED_WITH_DESCRIPTION = (
    "Other namespaces whose Tenants may be served this name when their own namespace has "
    "nothing of that name ('*': every namespace). Empty (the default): only this namespace's "
    "Tenants. Each Tenant's allowedModels still applies."
)


class Model(BaseModel):
    """Base of every API type: immutable, strict about unknown fields, camelCase on the wire."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_patch(self) -> dict[str, Any]:
        """Only the fields given when the object was built, camelCase: a merge patch that
        leaves every other field as the API server has it (a field given as None clears it)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def rfc3339(moment: datetime.datetime) -> str:
    """``moment`` as every status, condition and Event time is written: RFC 3339 in UTC, whole
    seconds, with 'Z' (metav1.Time's form). Seconds only, so that a pass that decides nothing
    new writes the same text and the status compares equal."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_rfc3339(text: str) -> datetime.datetime:
    """A time written by :func:`rfc3339` (or any RFC 3339 text with 'Z' or an offset).

    Raises ValueError on anything else: callers decide what an unreadable time means.
    """
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(Model):
    """One observation of the object's state, in the shape of metav1.Condition."""

    type: str = Field(description="Kind of condition, for example Ready, Progressing or Degraded.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        default="",
        description="One CamelCase word a program can switch on, for example ZoneLost.",
    )
    message: str = Field(
        default="",
        description="What happened and what to do about it, for a human.",
    )
    last_transition_time: str | None = Field(
        default=None,
        description="RFC 3339 time at which status last changed.",
    )
    observed_generation: int | None = Field(
        default=None,
        description="metadata.generation that this condition was computed from.",
    )


def conditions_field() -> Any:
    """The ``conditions`` list every status carries, keyed by type as Kubernetes does."""
    return Field(
        default_factory=list,
        description="Standard conditions, one per type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )


def observed_generation_field() -> Any:
    """The ``observedGeneration`` every status carries."""
    return Field(
        default=None,
        description="metadata.generation of the spec this status describes; lags while the "
        "operator has not caught up.",
    )


def cel(rule: str, message: str = "", *, expr: str = "", reason: str = "") -> dict[str, str]:
    """A CEL validation rule for ``x-kubernetes-validations``.

    ``message`` is fixed text; ``expr`` is a CEL messageExpression that can quote the offending
    values (more actionable). ``reason`` is an optional StatusReason such as FieldValueInvalid.
    """
    out = {"rule": rule}
    if message:
        out["message"] = message
    if expr:
        out["messageExpression"] = expr
    if reason:
        out["reason"] = reason
    return out


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` carrying CEL rules, for a model_config or a Field."""
    return {"x-kubernetes-validations": list(rules)}


def refuse_first(problems: list[tuple[bool, str]]) -> None:
    """Raise ValueError with the message of the first (failed, message) pair that failed.

    The models' validators mirror the CRD's CEL rules with this, so that parsing outside the
    API server (static gateway config, tests) refuses the same objects.
    """
    for failed, message in problems:
        if failed:
            raise ValueError(message)
