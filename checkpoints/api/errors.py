"""One error shape for every API answer: ``{"error": code, "detail": ...}``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Wrap DRF's handler so clients can branch on a stable ``error`` code."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.SIGNET_MAX_BODY_BYTES
        return Response(
            {"error": "too_large", "detail": f"The body is over {limit} bytes."}, status=413
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        code = "invalid"
        detail: Any = response.data
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else "error"
        detail = (
            response.data.get("detail", response.data)
            if isinstance(response.data, dict)
            else response.data
        )
    else:  # Http404 and PermissionDenied from Django, converted by DRF
        code = "not_found" if response.status_code == 404 else "permission_denied"
        detail = response.data.get("detail") if isinstance(response.data, dict) else None
    response.data = {"error": code, "detail": detail}
    return response
