"""``manage.py mcp_server [--token-env NAME]``: Signet's MCP server over stdio.

For an agent on the service's own machine, started by hand in its MCP configuration
(``install_hooks`` registers the service's HTTP endpoint instead, which works from any
machine and opens no database there). It talks to the database directly, as the owner of
the token in ``$SIGNET_TOKEN``; without a valid token that has the ``read`` scope it does
not start (the reason on stderr, exit status 1).
``session_digest`` also needs ``write``, checked when it is called.

The current session is ``$SIGNET_SESSION_KEY`` when set, else the owner's most recently
active live session whose project holds this process's working directory (the agent's).
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.mcp.principal import McpPrincipal, principal_bind
from checkpoints.mcp.server import mcp_server_get
from checkpoints.models import Scope
from checkpoints.services.tokens import token_authenticate
from hooks.install import DEFAULT_TOKEN_ENV

SESSION_ENV = "SIGNET_SESSION_KEY"


class Command(BaseCommand):
    help = (
        "Run Signet's MCP server on stdin/stdout as the owner of the token in the environment "
        "variable --token-env (SIGNET_TOKEN); refuses to start without a valid 'read' token."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--token-env",
            default=DEFAULT_TOKEN_ENV,
            help=f"Environment variable holding the API token ({DEFAULT_TOKEN_ENV}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["token_env"]
        raw = os.environ.get(name, "").strip()
        if not raw:
            raise CommandError(f"${name} is not set: export an API token with the 'read' scope.")
        token = token_authenticate(raw=raw)
        if token is None:
            raise CommandError(f"The token in ${name} is invalid or revoked.")
        if not token.has_scope(Scope.READ):
            raise CommandError(
                f"The token in ${name} lacks the 'read' scope (session_digest also needs 'write')."
            )
        # The configuration is read through the database cache, whose table ``serve`` creates:
        # this server may start before the service ever has.
        call_command("createcachetable", verbosity=0)
        principal = McpPrincipal(
            owner=token.owner,
            scopes=frozenset(token.scopes),
            session_key=os.environ.get(SESSION_ENV, "").strip(),
            cwd=os.getcwd(),
            raw_token=raw,
        )
        with principal_bind(principal, recycle=True):
            mcp_server_get().run("stdio")
