"""Why a request is refused, and the one table that maps each reason to HTTP and OpenAI's shape."""

from __future__ import annotations

import dataclasses
import enum


class Reason(enum.StrEnum):
    """A refusal reason; its value is the OpenAI-style error ``code``."""

    MALFORMED_JSON = "malformed_json"
    INVALID_REQUEST = "invalid_request"
    CONTEXT_TOO_LONG = "context_length_exceeded"
    MAX_TOKENS_TOO_LARGE = "max_tokens_too_large"
    MISSING_API_KEY = "missing_api_key"
    INVALID_API_KEY = "invalid_api_key"
    MODEL_NOT_ALLOWED = "model_not_allowed"
    MODEL_NOT_FOUND = "model_not_found"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    BODY_TOO_LARGE = "request_too_large"
    BODY_TIMEOUT = "request_timeout"
    RATE_LIMITED = "rate_limit_exceeded"
    DAILY_QUOTA = "insufficient_quota"
    CONCURRENCY_LIMIT = "concurrency_limit_exceeded"
    QUEUE_FULL = "queue_full"
    SHED = "overloaded"
    DEADLINE_UNMEETABLE = "deadline_unmeetable"
    QUEUE_TIMEOUT = "queue_timeout"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    NO_ENDPOINTS = "no_healthy_upstream"
    QUOTA_BACKEND_DOWN = "quota_backend_unavailable"
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    ADAPTER_PENDING = "adapter_not_verified"
    ADAPTER_REFUSED = "adapter_refused"
    ADAPTER_LOAD_TIMEOUT = "adapter_load_timeout"
    ADAPTER_LOAD_FAILED = "adapter_load_failed"
    ROUTE_TARGET_NOT_FOUND = "route_target_not_found"
    ROUTE_TARGET_NOT_ALLOWED = "route_target_not_allowed"
    REVISION_PIN_NOT_ALLOWED = "revision_pin_not_allowed"


@dataclasses.dataclass(frozen=True, slots=True)
class Mapping:
    status: int
    type: str  # OpenAI's error "type"


STATUS: dict[Reason, Mapping] = {
    Reason.MALFORMED_JSON: Mapping(400, "invalid_request_error"),
    Reason.INVALID_REQUEST: Mapping(400, "invalid_request_error"),
    Reason.CONTEXT_TOO_LONG: Mapping(400, "invalid_request_error"),
    Reason.MAX_TOKENS_TOO_LARGE: Mapping(400, "invalid_request_error"),
    Reason.MISSING_API_KEY: Mapping(401, "authentication_error"),
    Reason.INVALID_API_KEY: Mapping(401, "authentication_error"),
    Reason.MODEL_NOT_ALLOWED: Mapping(403, "permission_error"),
    Reason.REVISION_PIN_NOT_ALLOWED: Mapping(403, "permission_error"),
    # another namespace's ModelRoute chose a model the tenant may not call (model_routing.permits)
    Reason.ROUTE_TARGET_NOT_ALLOWED: Mapping(403, "permission_error"),
    Reason.MODEL_NOT_FOUND: Mapping(404, "invalid_request_error"),
    Reason.NOT_FOUND: Mapping(404, "invalid_request_error"),
    Reason.METHOD_NOT_ALLOWED: Mapping(405, "invalid_request_error"),
    Reason.BODY_TIMEOUT: Mapping(408, "invalid_request_error"),
    Reason.BODY_TOO_LARGE: Mapping(413, "invalid_request_error"),
    Reason.RATE_LIMITED: Mapping(429, "rate_limit_error"),
    Reason.DAILY_QUOTA: Mapping(429, "insufficient_quota"),
    Reason.CONCURRENCY_LIMIT: Mapping(429, "rate_limit_error"),
    Reason.QUEUE_FULL: Mapping(429, "rate_limit_error"),
    Reason.SHED: Mapping(503, "server_overloaded"),
    Reason.DEADLINE_UNMEETABLE: Mapping(503, "server_overloaded"),
    Reason.QUEUE_TIMEOUT: Mapping(503, "server_overloaded"),
    Reason.NO_ENDPOINTS: Mapping(503, "service_unavailable"),
    Reason.QUOTA_BACKEND_DOWN: Mapping(503, "service_unavailable"),
    Reason.UPSTREAM_ERROR: Mapping(502, "upstream_error"),
    Reason.DEADLINE_EXCEEDED: Mapping(504, "timeout"),
    Reason.UPSTREAM_TIMEOUT: Mapping(504, "timeout"),
    # LoRA adapters (policy.adapter_access, adapter_slots): the adapter, not the request, is at
    # fault; pending and a load timeout carry Retry-After, a refusal does not (its owner must
    # fix the artifact), a load the worker could not do is the worker's failure
    Reason.ADAPTER_PENDING: Mapping(503, "service_unavailable"),
    Reason.ADAPTER_REFUSED: Mapping(503, "service_unavailable"),
    Reason.ADAPTER_LOAD_TIMEOUT: Mapping(503, "service_unavailable"),
    Reason.ADAPTER_LOAD_FAILED: Mapping(502, "upstream_error"),
    # a ModelRoute chose a target nothing serves: the route's owner must fix it (policy of
    # model_routing.direct); the client's request was fine, so not a 4xx
    Reason.ROUTE_TARGET_NOT_FOUND: Mapping(503, "service_unavailable"),
}


#: 5xx refusals a client retry cannot help (the adapter's owner must act first): answered with
#: ``x-should-retry: false``, which the OpenAI SDKs obey instead of retrying every 5xx.
FINAL: frozenset[Reason] = frozenset({Reason.ADAPTER_REFUSED, Reason.ROUTE_TARGET_NOT_FOUND})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """A refusal: why, what to tell the caller, and when to try again (seconds), if ever."""

    reason: Reason
    message: str
    retry_after: float | None = None
    param: str | None = None

    @property
    def status(self) -> int:
        return STATUS[self.reason].status

    def body(self) -> dict[str, object]:
        """OpenAI's error JSON."""
        return {
            "error": {
                "message": self.message,
                "type": STATUS[self.reason].type,
                "param": self.param,
                "code": self.reason.value,
            }
        }
