"""API tokens: issue, authenticate, revoke. Raw tokens exist only in the creator's hands."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from checkpoints.models import ApiToken, Scope, hash_token
from checkpoints.services.locks import write_serialized

TOKEN_PREFIX = "sig_"  # noqa: S105 (a marker, not a secret)
PREFIX_SHOWN_CHARS = 12  # "sig_" + 8 characters: enough to tell tokens apart in a list
# Writing last_used_at on every request would make every read a write; a minute is plenty.
LAST_USED_RESOLUTION = timedelta(seconds=60)
TOKEN_AUTH_FIELDS = (
    "id",
    "name",
    "prefix",
    "scopes",
    "revoked_at",
    "last_used_at",
    "owner__id",
    "owner__username",
    "owner__is_active",
)


def token_create(*, owner: User, name: str, scopes: Iterable[str]) -> tuple[ApiToken, str]:
    """Issue a token for ``owner`` with the given scopes; return the row and the raw token.

    The raw token is returned once and never stored: the row keeps its SHA-256 and prefix.
    """
    wanted = sorted(set(scopes))
    unknown = [scope for scope in wanted if scope not in Scope.values]
    if not wanted or unknown:
        raise ValueError(f"scopes must be among {', '.join(Scope.values)}; got {wanted}")
    token = ApiToken(owner=owner, name=name, scopes=wanted)
    raw = token_assign_secret(token=token)
    token.save()
    return token, raw


def token_assign_secret(*, token: ApiToken) -> str:
    """Give an unsaved token a fresh secret (hash and prefix); return the raw secret."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token.prefix = raw[:PREFIX_SHOWN_CHARS]
    token.token_hash = hash_token(raw)
    return raw


# Tokens this process authenticated lately: hash -> (monotonic expiry, token with owner).
# Every request authenticates, and the look-up is most of a hook's ORM work; a token seen in
# the last SIGNET_TOKEN_CACHE_SECONDS is taken from here. Revoking a token, or saving a token
# or a user, clears this process's entries at once (``token_cache_clear``); other processes
# see the change within that many seconds. Only valid tokens are kept, at most this many.
_recent: dict[str, tuple[float, ApiToken]] = {}
MAX_RECENT_TOKENS = 1024


def token_cache_clear(**_: Any) -> None:
    """Forget the tokens this process authenticated (a signal receiver, too)."""
    _recent.clear()


def token_authenticate(*, raw: str) -> ApiToken | None:
    """Return the active token matching ``raw`` (with its owner loaded), else None."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    digest = hash_token(raw)
    ttl = settings.SIGNET_TOKEN_CACHE_SECONDS
    recent = _recent.get(digest) if ttl > 0 else None
    if recent is not None and recent[0] > time.monotonic():
        return recent[1]
    try:
        # Every request runs this: only the columns auth needs (wide rows cost compile time).
        token = (
            ApiToken.objects.select_related("owner")
            .only(*TOKEN_AUTH_FIELDS)
            .get(token_hash=digest, revoked_at__isnull=True)
        )
    except ApiToken.DoesNotExist:
        _recent.pop(digest, None)
        return None
    if not token.owner.is_active:
        _recent.pop(digest, None)
        return None
    if ttl > 0:
        if len(_recent) >= MAX_RECENT_TOKENS:
            _recent.clear()
        _recent[digest] = (time.monotonic() + ttl, token)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        with write_serialized():  # a write like any other: queue, don't poll (locks.py)
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token; requests carrying it get 401 from now on."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    token_cache_clear()
    return token
