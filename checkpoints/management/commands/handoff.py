"""``manage.py handoff FROM_KEY --to HARNESS [--user NAME]``."""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.services.exports import SessionNotFoundError, session_find

# The command that starts each harness.
HARNESS_COMMANDS = {
    "claude-code": "claude",
    "codex": "codex",
    "gemini": "gemini",
    "opencode": "opencode",
    "openclaw": "openclaw",
}
ENV_VAR = "SIGNET_PREVIOUS_SESSION_KEY"


class Command(BaseCommand):
    help = (
        f"Print the command that starts a session continuing FROM_KEY in another harness: "
        f"the hook client sends {ENV_VAR} as the new session's previous_session_key, so its "
        f"recovery context comes from FROM_KEY's latest checkpoint."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_key", help="The session to continue.")
        parser.add_argument(
            "--to", required=True, choices=sorted(HARNESS_COMMANDS), help="The next harness."
        )
        parser.add_argument("--user", default="", help="The owner's username.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            session = session_find(session_key=options["session_key"], username=options["user"])
        except SessionNotFoundError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{ENV_VAR}={shlex.quote(session.session_key)} {HARNESS_COMMANDS[options['to']]}"
        )
