"""``manage.py create_user NAME [--password-from-env VAR]``: a dashboard login."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.services.accounts import account_ensure


class Command(BaseCommand):
    help = (
        "Create a user who can log in to the dashboard (no staff rights needed), or give an "
        "existing one a password. Without --password-from-env a password is generated and "
        "printed once, unless the account already has one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--password-from-env",
            metavar="VAR",
            help="Read the password from this environment variable (it is never printed).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        password = None
        if options["password_from_env"]:
            password = os.environ.get(options["password_from_env"], "")
            if not password:
                raise CommandError(f"{options['password_from_env']} is not set or empty.")
        login = account_ensure(username=options["username"], password=password)
        what = "Created" if login.created else "Updated"
        if login.password is not None:
            self.stdout.write(
                f"{what} user {login.username!r}; password (shown once): {login.password}"
            )
        elif password:
            self.stdout.write(f"{what} user {login.username!r}; password set from the env.")
        else:
            self.stdout.write(f"User {login.username!r} exists and keeps its password.")
