"""Show times in the viewer's time zone: the browser names it in the ``tz`` cookie
(``static/signet/site.js`` sets it), this middleware activates it for the request."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

TZ_COOKIE = "tz"


def zone_from_cookie(value: str) -> ZoneInfo | None:
    """The zone an IANA name names, or None for anything else (never raises)."""
    if not value or len(value) > 64 or ".." in value or value.startswith("/"):
        return None
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        return None


class ViewerTimezoneMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        zone = zone_from_cookie(unquote(request.COOKIES.get(TZ_COOKIE, "")))
        if zone is None:
            timezone.deactivate()
            return self.get_response(request)
        with timezone.override(zone):
            return self.get_response(request)
