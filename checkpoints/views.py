"""The health probe and the favicon (the dashboard's pages are ``checkpoints.dashboard``)."""

from __future__ import annotations

import logging

from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from checkpoints.selectors import database_size

logger = logging.getLogger(__name__)


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and readiness: the database answers, the cache answers, the scheduler's state."""
    checks = {"database": _check_database(), "cache": _check_cache()}
    healthy = all(value == "ok" for value in checks.values())
    body: dict[str, object] = {
        "status": "ok" if healthy else "degraded",
        **checks,
        "scheduler": _scheduler_state(),
    }
    if checks["database"] == "ok":
        size = database_size()
        if size is not None:
            body["database_bytes"] = size["bytes"]
            if "free_bytes" in size:
                body["database_free_bytes"] = size["free_bytes"]
    return JsonResponse(body, status=200 if healthy else 503)


def _check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.exception("health check: database")
        return "error"
    return "ok"


def _check_cache() -> str:
    try:
        cache.set("signet:healthz", 1, timeout=5)
        ok = cache.get("signet:healthz") == 1
    except Exception:
        logger.exception("health check: cache")
        return "error"
    return "ok" if ok else "error"


def _scheduler_state() -> str:
    """'running' when a django-q2 cluster has reported in, else 'not running'."""
    try:
        from django_q.status import Stat

        return "running" if Stat.get_all() else "not running"
    except Exception:
        logger.exception("health check: scheduler")
        return "unknown"


@require_safe
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico whatever the page says: send them to the SVG."""
    return HttpResponseRedirect(static("signet/favicon.svg"))
