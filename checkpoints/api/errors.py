"""One error shape for every API answer: ``{"error": code, "detail": ...}``."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, InternalError, OperationalError
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

logger = logging.getLogger(__name__)

# Seconds a client should wait before retrying while the database is unavailable.
DATABASE_RETRY_AFTER = 30

# PostgreSQL's SQLSTATE for a write in a read-only transaction (a standby, or a database
# set read-only for maintenance): unavailable for now, like a lost connection.
_READ_ONLY_SQLSTATE = "25006"


def _database_unavailable(exc: Exception) -> bool:
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    cause = exc.__cause__
    return isinstance(exc, InternalError) and (
        getattr(cause, "sqlstate", None) == _READ_ONLY_SQLSTATE
        or getattr(cause, "pgcode", None) == _READ_ONLY_SQLSTATE
    )


def _unexpected(exc: Exception, context: dict[str, Any]) -> Response:
    """The last resort: an answer in the API's shape, never Django's HTML page."""
    set_rollback()
    view = context.get("view")
    where = type(view).__name__ if view is not None else "the API"
    if _database_unavailable(exc):
        logger.warning("Database unavailable in %s: %s", where, exc)
        return Response(
            {"error": "unavailable", "detail": "The database is unavailable; retry later."},
            status=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER)},
        )
    logger.error("Unhandled error in %s", where, exc_info=exc)
    return Response(
        {"error": "server_error", "detail": "An unexpected error occurred; it has been logged."},
        status=500,
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Wrap DRF's handler so clients can branch on a stable ``error`` code."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.SIGNET_MAX_BODY_BYTES
        return Response(
            {"error": "too_large", "detail": f"The body is over {limit} bytes."}, status=413
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return _unexpected(exc, context)
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
