"""One error shape for every API answer: ``{"error": code, "detail": ...}``."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Wrap DRF's handler so clients can branch on a stable ``error`` code."""
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
