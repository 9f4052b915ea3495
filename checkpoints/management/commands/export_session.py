"""``manage.py export_session KEY [--user NAME] [--output FILE]``."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.services.exports import SessionNotFoundError, session_export, session_find


class Command(BaseCommand):
    help = (
        "Print a session as one JSON document (the session, its checkpoints and injections; "
        "redacted), which import_sessions signet reads back."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_key", help="The session's key.")
        parser.add_argument("--user", default="", help="The owner's username.")
        parser.add_argument("--output", default="", help="Write to this file, not stdout.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            session = session_find(session_key=options["session_key"], username=options["user"])
        except SessionNotFoundError as exc:
            raise CommandError(str(exc)) from None
        text = json.dumps(session_export(session=session), indent=2, ensure_ascii=False)
        if options["output"]:
            try:
                with open(options["output"], "w", encoding="utf-8") as handle:
                    handle.write(text + "\n")
            except OSError as exc:
                raise CommandError(f"{options['output']}: {exc.strerror or exc}") from None
            self.stderr.write(f"Wrote {session.session_key} to {options['output']}")
        else:
            self.stdout.write(text)
