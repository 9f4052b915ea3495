"""Who calls the MCP tools: set by a transport, read by the tools. Free of the SDK, whose
import takes about a second: the URL configuration imports this, every process loads that."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from django.contrib.auth.models import User

from checkpoints.services.tokens import token_authenticate


@dataclass(frozen=True)
class McpPrincipal:
    """Who calls the tools, and what the transport knows of their session."""

    owner: User
    scopes: frozenset[str]
    session_key: str = ""  # SIGNET_SESSION_KEY (stdio), X-Signet-Session or ?session= (HTTP)
    cwd: str = ""  # the stdio server's working directory: the agent's project
    # stdio only: the raw token, checked again at every call (the process lives as long as
    # the agent's session, and a revoked token must stop working at once).
    raw_token: str = field(default="", repr=False)


class PrincipalRevoked(Exception):
    """The caller's token was revoked (or its owner deactivated) since the server started."""


def principal_refresh(principal: McpPrincipal) -> McpPrincipal:
    """``principal`` with its owner and scopes as they are now; ``PrincipalRevoked`` when its
    token no longer authenticates. A principal without a raw token (HTTP: authenticated by
    the request) is returned as is."""
    if not principal.raw_token:
        return principal
    token = token_authenticate(raw=principal.raw_token)
    if token is None:
        raise PrincipalRevoked("This server's token was revoked; restart it with a valid one.")
    return replace(principal, owner=token.owner, scopes=frozenset(token.scopes))


principal_current: ContextVar[McpPrincipal] = ContextVar("signet_mcp_principal")
# stdio: one long-lived process, whose connection may have been dropped between two calls.
recycle_connections: ContextVar[bool] = ContextVar("signet_mcp_recycle", default=False)


@contextmanager
def principal_bind(principal: McpPrincipal, *, recycle: bool = False) -> Iterator[None]:
    """Make ``principal`` the caller of the tools run inside this block (and its tasks);
    with ``recycle``, each tool call first drops a database connection gone stale."""
    token = principal_current.set(principal)
    recycled = recycle_connections.set(recycle)
    try:
        yield
    finally:
        recycle_connections.reset(recycled)
        principal_current.reset(token)
