"""Per-token, per-scope throttling; the counting is ``services.throttling``'s."""

from __future__ import annotations

import math
from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from checkpoints.api.scopes import required_scope_for
from checkpoints.models import ApiToken
from checkpoints.services.throttling import CounterUnavailable, counter_increment


class ThrottleUnavailable(exceptions.APIException):
    """The throttle could not count the request, so it is not served (fails closed)."""

    status_code = 503
    default_code = "unavailable"
    default_detail = "The request could not be counted against its rate limit; retry later."
    wait = 30  # DRF sends it as Retry-After, as errors.py does for an unavailable database


class TokenScopeThrottle(SimpleRateThrottle):
    """One counter per (token, scope, window), at the rate ``DEFAULT_THROTTLE_RATES[scope]``.

    A fixed-window counter rather than DRF's list of timestamps: at the ingest rate that list
    would hold thousands of entries, rewritten on every hook call; a counter is one upsert.
    Requests without a token fall in the ``anon`` bucket of their address (DRF's
    ``get_ident``: ``REMOTE_ADDR``, or with ``NUM_PROXIES`` set from
    ``SIGNET_TRUSTED_PROXIES`` the address that many hops from the right of
    X-Forwarded-For).
    """

    def get_rate(self) -> str | None:
        # The rate depends on the view, so it is resolved in allow_request, not __init__.
        return None

    def allow_request(self, request: Request, view: Any) -> bool:
        token = request.auth
        if isinstance(token, ApiToken):
            return self.count(scope=required_scope_for(request, view) or "read", ident=token.pk)
        return self.count(scope="anon", ident=self.get_ident(request))

    def count(self, *, scope: str, ident: object) -> bool:
        """Count one request of ``ident`` in ``scope``; False once over the scope's rate."""
        self.scope = scope
        self.rate = self.THROTTLE_RATES.get(scope)
        if self.rate is None:
            return True
        limit, duration = self.parse_rate(self.rate)
        assert limit is not None
        assert duration is not None
        self.now = self.timer()
        try:
            counted = counter_increment(bucket=f"{scope}:{ident}", duration=duration, now=self.now)
        except CounterUnavailable as exc:
            raise ThrottleUnavailable() from exc
        self.window_end = counted.window_end
        return counted.total <= limit

    def wait(self) -> float | None:
        return max(1.0, math.ceil(self.window_end - self.now))


def token_failure_throttle(*, request: Request) -> None:
    """Count a request whose bearer token was refused in its address's ``anon`` bucket.

    Raises ``Throttled`` (429) once the address is over the anonymous rate: DRF
    authenticates before it throttles, so without this a client guessing tokens would get
    401 after 401, never slowed down.
    """
    throttle = TokenScopeThrottle()
    if not throttle.count(scope="anon", ident=throttle.get_ident(request)):
        raise exceptions.Throttled(wait=throttle.wait())
