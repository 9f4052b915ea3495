"""One error shape for every API answer: ``{"error": code, "detail": ...}``.

DRF's views answer through :func:`exception_handler`. What fails before a view is reached
(no route, a refused request, an error in a middleware) goes to Django's error handlers,
which ``signet_site/urls.py`` points at the ``handler*`` functions here: JSON under
``/api/``, Django's own pages elsewhere. (With ``DEBUG`` on, Django shows its technical
pages instead of calling them, as it does for every URL.)
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, InternalError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

logger = logging.getLogger(__name__)

# Seconds a client should wait before retrying while the database is unavailable.
DATABASE_RETRY_AFTER = 30

# PostgreSQL's SQLSTATE for a write in a read-only transaction (a standby, or a database
# set read-only for maintenance): unavailable for now, like a lost connection.
_READ_ONLY_SQLSTATE = "25006"

# Where ``signet_site/urls.py`` mounts the API.
API_PREFIX = "/api/"
# And the MCP endpoint's: its errors are JSON too.
MCP_PATH = "/mcp/"


def error_response(code: str, detail: str, status: int) -> JsonResponse:
    """The API's error shape, for an answer given outside a DRF view."""
    return JsonResponse({"error": code, "detail": detail}, status=status)


# The answer while the database cannot be used, in a view (``_unexpected``) or outside one.
_UNAVAILABLE = {"error": "unavailable", "detail": "The database is unavailable; retry later."}
_UNAVAILABLE_HEADERS = {"Retry-After": str(DATABASE_RETRY_AFTER)}


def unavailable_response() -> JsonResponse:
    """503 for a database that cannot be used now, outside a DRF view (a middleware)."""
    return JsonResponse(_UNAVAILABLE, status=503, headers=_UNAVAILABLE_HEADERS)


def too_large_detail(limit: int | None = None) -> str:
    """Why a body was refused: over ``limit`` bytes (the API's own limit by default)."""
    return f"The body is over {settings.SIGNET_MAX_BODY_BYTES if limit is None else limit} bytes."


def _is_api(request: HttpRequest) -> bool:
    path = request.path_info
    return path.startswith(API_PREFIX) or path == MCP_PATH.rstrip("/") or path.startswith(MCP_PATH)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler400``: a request Django refused (a bad Host header, a malformed body)."""
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    return error_response("bad_request", "The request is malformed.", 400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler403``: PermissionDenied raised outside a DRF view."""
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return error_response("permission_denied", "You may not do this.", 403)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: a URL no route matches."""
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return error_response(
        "not_found",
        f"No API endpoint at {request.path}; the routes are in {API_PREFIX}schema/.",
        404,
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: an exception outside a DRF view (Django has logged it already)."""
    if not _is_api(request):
        return defaults.server_error(request)
    return error_response("server_error", "An unexpected error occurred; it has been logged.", 500)


def database_unavailable(exc: Exception) -> bool:
    """Whether ``exc`` says the database cannot be used now (down, unreachable, read-only)."""
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
    if database_unavailable(exc):
        logger.warning("Database unavailable in %s: %s", where, exc)
        return Response(_UNAVAILABLE, status=503, headers=_UNAVAILABLE_HEADERS)
    logger.error("Unhandled error in %s", where, exc_info=exc)
    return Response(
        {"error": "server_error", "detail": "An unexpected error occurred; it has been logged."},
        status=500,
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Wrap DRF's handler so clients can branch on a stable ``error`` code."""
    request = context.get("request")
    if request is not None:
        # An error is JSON whatever the view renders on success (the schema view: YAML).
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = JSONRenderer.media_type
    if isinstance(exc, RequestDataTooBig):
        return Response({"error": "too_large", "detail": too_large_detail()}, status=413)
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
