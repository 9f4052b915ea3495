"""``manage.py create_token --user NAME --scopes ingest,read,write [--name LABEL]``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.models import Scope
from checkpoints.services.accounts import account_ensure
from checkpoints.services.tokens import token_create


class Command(BaseCommand):
    help = (
        "Create an API token (creating the user, with a dashboard password, if needed). "
        "The raw token is the last line of the output and is never shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="Owner's username.")
        parser.add_argument(
            "--scopes",
            default="ingest,read",
            help=f"Comma-separated, among {','.join(Scope.values)} (default: ingest,read).",
        )
        parser.add_argument("--name", default="", help="A label to recognise the token by.")

    def handle(self, *args: Any, **options: Any) -> None:
        scopes = [part.strip() for part in options["scopes"].split(",") if part.strip()]
        unknown = sorted(set(scopes) - set(Scope.values))
        if not scopes or unknown:
            raise CommandError(
                f"--scopes takes one or more of {','.join(Scope.values)}; unknown: {unknown}"
            )
        login = account_ensure(username=options["user"])
        if login.password is not None:
            self.stdout.write(
                f"{'Created' if login.created else 'Updated'} user {login.username!r}; "
                f"dashboard password (shown once): {login.password}"
            )
        user = get_user_model().objects.get(username=login.username)
        name = options["name"] or f"{user.get_username()}-{'-'.join(sorted(scopes))}"
        token, raw = token_create(owner=user, name=name, scopes=scopes)
        self.stdout.write(
            f"Token {token.name!r} ({token.prefix}…) for {user.get_username()!r}, "
            f"scopes: {', '.join(token.scopes)}. Shown once; store it now:"
        )
        self.stdout.write(raw)
