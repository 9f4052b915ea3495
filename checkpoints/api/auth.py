"""Bearer-token authentication and scope permission for the REST API and hook endpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest
from rest_framework import HTTP_HEADER_ENCODING, exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from checkpoints.api.scopes import required_scope_for
from checkpoints.api.throttles import token_failure_throttle
from checkpoints.models import ApiToken
from checkpoints.services.tokens import token_authenticate

if TYPE_CHECKING:  # rest_framework.views imports this module through api_settings
    from rest_framework.views import APIView


def _bearer_credential(header: bytes) -> tuple[str | None, str]:
    """Read an ``Authorization`` header: ``(token, "")`` for a well-formed bearer token,
    ``(None, "")`` for no bearer token at all, ``(None, why)`` for a malformed one."""
    parts = header.split()
    if not parts or parts[0].lower() != b"bearer":
        return None, ""
    if len(parts) != 2:
        return None, "Malformed Authorization header."
    try:
        return parts[1].decode("ascii"), ""
    except UnicodeDecodeError:
        return None, "Invalid token."


def bearer_token(request: HttpRequest) -> ApiToken | None:
    """The valid token a well-formed ``Authorization: Bearer <token>`` header names, else None.

    The checks ``BearerTokenAuthentication`` makes, without its refusals: a caller that gets
    None hands the request to DRF, which refuses it (and counts the refusal) the usual way.
    """
    try:  # the header as DRF's get_authorization_header reads it
        header = request.META.get("HTTP_AUTHORIZATION", "").encode(HTTP_HEADER_ENCODING)
    except UnicodeEncodeError:
        return None
    raw, _ = _bearer_credential(header)
    return None if raw is None else token_authenticate(raw=raw)


class BearerTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <token>``; ``request.auth`` is the ``ApiToken``.

    A refused token counts against its address's ``anon`` rate: past it the answer is 429,
    not 401 (see ``token_failure_throttle``).
    """

    def authenticate(self, request: Request) -> tuple[AbstractBaseUser, ApiToken] | None:
        raw, malformed = _bearer_credential(get_authorization_header(request))
        if malformed:
            self._refuse(request, malformed)
        if raw is None:
            return None
        token = token_authenticate(raw=raw)
        if token is None:
            self._refuse(request, "Invalid or revoked token.")
        return token.owner, token

    def _refuse(self, request: Request, detail: str) -> NoReturn:
        token_failure_throttle(request=request)
        raise exceptions.AuthenticationFailed(detail)

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (with this challenge) rather than 403 to missing credentials.
        return 'Bearer realm="signet"'


class HasTokenScope(BasePermission):
    """Allow a request whose token carries the view's ``required_scope``.

    A view sets ``required_scope`` (one scope for every method) or ``required_scopes`` (a
    mapping of HTTP method to scope). A view that names no scope admits any valid token.
    """

    message = "This token lacks the scope this route needs."

    def has_permission(self, request: Request, view: APIView) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            if request.user and request.user.is_authenticated:
                return False
            raise exceptions.NotAuthenticated()
        scope = required_scope_for(request, view)
        if scope is None:
            return True
        if token.has_scope(scope):
            return True
        self.message = f"This token lacks the '{scope}' scope."
        return False
