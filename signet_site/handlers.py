"""The WSGI application: hook posts through a short middleware list, the rest through all.

A hook post is an agent's machine calling with a bearer token and a JSON body, many times a
minute: it has no cookie, no session, no form and no page. The browser's middleware
(sessions, CSRF, the signed-in user, messages, the viewer's time zone, sign-in lockout,
static files) has nothing to do for it, yet costs it about a quarter of a millisecond of
Python per call, much of the work that is not the hook's own (``bench/hook_path.py``). So
paths under ``HOOK_PATH_PREFIX`` go to a second Django handler built from
``settings.HOOK_MIDDLEWARE``; every other path, the rest of the API included, keeps
``settings.MIDDLEWARE``. Both handlers serve the same URLconf and views, and both send
Django's request signals, so connections are managed the same way.

The hooks' handler also remembers how it resolved its last few paths (``HOOK_RESOLVED``):
hooks post to a handful of URLs, and matching one against the URLconf again (three levels
of patterns, one converter) is about 15 us of each call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest
from django.urls import ResolverMatch, get_resolver

from checkpoints.harnesses import ADAPTERS

HOOK_PATH_PREFIX = "/api/hooks/"
# How many hook paths the hooks' handler keeps resolved: a few per harness in use. Only a
# path that names a harness we have, and is no longer than ``HOOK_RESOLVED_PATH_CHARS``, is
# kept (anyone may send any path, before any token is checked); even so the cache is bounded
# (an event name may be part of the path), the least recently used path going first.
HOOK_RESOLVED = 64
HOOK_RESOLVED_PATH_CHARS = 128

StartResponse = Callable[..., Any]


class HookHandler(WSGIHandler):
    """Django's WSGI handler with ``settings.HOOK_MIDDLEWARE`` in place of ``MIDDLEWARE``."""

    def load_middleware(self, is_async: bool = False) -> None:
        # Django builds the chain from settings.MIDDLEWARE; this runs once, when the
        # application is made (at import, before any request thread), never during one.
        site_middleware = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.HOOK_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = site_middleware
        # A resolved match is shared by the requests of its path (``resolve_request``): a
        # view middleware would be handed its keyword arguments to change.
        if self._view_middleware:  # type: ignore[attr-defined]  # Django sets it in load_middleware
            raise ImproperlyConfigured("HOOK_MIDDLEWARE cannot have process_view middleware")

    def resolve_request(self, request: HttpRequest) -> ResolverMatch:
        if hasattr(request, "urlconf"):  # set by a middleware: resolved as Django does
            return super().resolve_request(request)
        path = request.path_info
        if len(path) > HOOK_RESOLVED_PATH_CHARS or _harness_of(path) not in ADAPTERS:
            return super().resolve_request(request)
        match = _hook_resolve(settings.ROOT_URLCONF, path)
        request.resolver_match = match
        return match


def _harness_of(path: str) -> str:
    """The harness a hook path names (``/api/hooks/<harness>/...``)."""
    return path[len(HOOK_PATH_PREFIX) :].partition("/")[0]


@lru_cache(maxsize=HOOK_RESOLVED)
def _hook_resolve(urlconf: str, path: str) -> ResolverMatch:
    """``path`` resolved against ``urlconf``, once for all requests (a path that resolves to
    no view raises ``Resolver404`` each time; it is not kept). A match is read, never
    changed, by the request it serves: the view gets its own copy of the keyword arguments.
    """
    return get_resolver(urlconf).resolve(path)


@receiver(setting_changed)
def _urlconf_changed(*, setting: str, **kwargs: Any) -> None:
    # As Django forgets its resolvers (a test's URLconf): the same name may be another module.
    if setting == "ROOT_URLCONF":
        _hook_resolve.cache_clear()


class SignetApplication:
    """Hands each request to the hooks' handler or the site's, by its path."""

    def __init__(self) -> None:
        self.site = WSGIHandler()
        self.hooks = HookHandler()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        handler = self.hooks if path.startswith(HOOK_PATH_PREFIX) else self.site
        return handler(environ, start_response)
