"""Per-token, per-scope throttling, counted in the shared cache so all workers agree."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from checkpoints.api.auth import required_scope_for
from checkpoints.models import ApiToken


class TokenScopeThrottle(SimpleRateThrottle):
    """One bucket per (token, scope), at the rate ``DEFAULT_THROTTLE_RATES[scope]``.

    Requests without a token fall in the ``anon`` bucket of their client address.
    """

    cache_format = "signet:throttle:%(scope)s:%(ident)s"

    def get_rate(self) -> str | None:
        # The rate depends on the view, so it is resolved in allow_request, not __init__.
        return None

    def allow_request(self, request: Request, view: Any) -> bool:
        token = request.auth
        if isinstance(token, ApiToken):
            self.scope = required_scope_for(request, view) or "read"
            ident = str(token.pk)
        else:
            self.scope = "anon"
            ident = self.get_ident(request)
        self.rate = self.THROTTLE_RATES.get(self.scope)
        if self.rate is None:
            return True
        num_requests, duration = self.parse_rate(self.rate)
        assert num_requests is not None
        assert duration is not None
        self.num_requests, self.duration = num_requests, duration
        self.key = self.cache_format % {"scope": self.scope, "ident": ident}
        # DRF's sliding window: timestamps of the requests still inside it, newest first.
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - duration:
            self.history.pop()
        if len(self.history) >= num_requests:
            return self.throttle_failure()
        return self.throttle_success()

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return getattr(self, "key", None)
