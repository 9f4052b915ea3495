"""Login lockout (django-axes) for the admin and dashboard sign-in forms.

Failures are counted per (username, client address); past ``AXES_FAILURE_LIMIT`` that pair
is refused, right password or not, for ``AXES_COOLOFF_TIME``.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle


class LoginLockoutBackend(AxesStandaloneBackend):  # type: ignore[misc]
    """Axes' gate in front of the model backend, for sign-ins that come with a request.

    ``authenticate()`` without a request (the test client's ``login``, scripts) has no
    client address to count against and is passed on to the next backend; axes' own
    backend would raise instead.
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> AbstractBaseUser | None:
        if request is None:
            return None
        super().authenticate(request, username=username, password=password, **kwargs)
        return None


def client_address(request: HttpRequest) -> str | None:
    """The client's address as the API throttles see it (``SIGNET_TRUSTED_PROXIES``)."""
    ident: str | None = BaseThrottle().get_ident(Request(request))
    return ident
