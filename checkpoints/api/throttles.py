"""Per-token, per-scope throttling, counted in the shared cache so all workers agree."""

from __future__ import annotations

import math
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from checkpoints.api.auth import required_scope_for
from checkpoints.models import ApiToken


class TokenScopeThrottle(SimpleRateThrottle):
    """One counter per (token, scope, window), at the rate ``DEFAULT_THROTTLE_RATES[scope]``.

    A fixed-window counter rather than DRF's list of timestamps: at the ingest rate that list
    would hold thousands of entries, rewritten to the cache on every hook call; a counter is
    one small value. Requests without a token fall in the ``anon`` bucket of their address.
    """

    cache_format = "signet:throttle:%(scope)s:%(ident)s:%(window)d"

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
        limit, duration = self.parse_rate(self.rate)
        assert limit is not None
        assert duration is not None
        now = self.timer()
        window = int(now // duration)
        self.window_end = (window + 1) * duration
        self.now = now
        key = self.cache_format % {"scope": self.scope, "ident": ident, "window": window}
        # Read and write back, as DRF does: two racing requests may count once, which a
        # throttle can afford; an atomic add/incr costs several more queries on the
        # database cache, the default.
        count = int(self.cache.get(key, 0)) + 1
        self.cache.set(key, count, timeout=duration + 1)
        return count <= limit

    def wait(self) -> float | None:
        return max(1.0, math.ceil(self.window_end - self.now))
