"""OpenAPI documentation pieces: the bearer scheme and the error shape every route uses."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

ERROR_MEANINGS = {
    400: "Invalid input; `detail` names each field and why.",
    401: "No token, or a wrong or revoked one.",
    403: "The token lacks the scope this route needs.",
    404: "Not found (also what another owner's data answers, and a stale or bad cursor).",
    405: "Method not allowed.",
    413: "The body is over the configured limit.",
    415: "The body is not JSON.",
    429: "Throttled; retry after `Retry-After` seconds.",
}


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "checkpoints.api.auth.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An API token (`sig_…`)."}


class ErrorSerializer(serializers.Serializer[Any]):
    error = serializers.CharField(help_text="A stable code: invalid, not_found, throttled…")
    detail = serializers.JSONField(help_text="A message, or field → reasons for `invalid`.")


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """The documented error responses for ``codes`` (401, 403 and 429 are always added)."""
    wanted = sorted({*codes, 401, 403, 429})
    return {code: OpenApiResponse(ErrorSerializer, ERROR_MEANINGS[code]) for code in wanted}


def paginated(name: str, serializer: Any) -> Any:
    """The documented shape of a cursor page of ``serializer`` rows."""
    from drf_spectacular.utils import inline_serializer

    return inline_serializer(
        name,
        {
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer(many=True),
        },
    )
