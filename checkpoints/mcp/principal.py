"""Who calls the MCP tools: set by a transport, read by the tools. Free of the SDK, whose
import takes about a second: the URL configuration imports this, every process loads that."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.contrib.auth.models import User


@dataclass(frozen=True)
class McpPrincipal:
    """Who calls the tools, and what the transport knows of their session."""

    owner: User
    scopes: frozenset[str]
    session_key: str = ""  # SIGNET_SESSION_KEY (stdio), X-Signet-Session or ?session= (HTTP)
    cwd: str = ""  # the stdio server's working directory: the agent's project


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
