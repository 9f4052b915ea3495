"""``manage.py install_hooks claude-code [--url URL] [--settings-file PATH] [--token-env NAME]
[--python PATH] [--uninstall]``: write Signet's hooks into the harness's settings (or take them
out).

A thin wrapper around ``hooks.install``; it touches no database. The file option is not
``--settings``: Django takes that one for every command (it sets DJANGO_SETTINGS_MODULE
before the command is even looked up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from hooks.install import (
    DEFAULT_CLAUDE_SETTINGS,
    DEFAULT_TOKEN_ENV,
    DEFAULT_URL,
    InstallError,
    InstallResult,
    install_claude_code,
    uninstall_claude_code,
)


class Command(BaseCommand):
    help = (
        "Install Signet's hooks into a harness's settings file, merging with what is there "
        "(idempotent, with a backup); --uninstall takes them out again."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("harness", choices=["claude-code"])
        parser.add_argument("--url", default=DEFAULT_URL, help=f"Server URL ({DEFAULT_URL}).")
        parser.add_argument(
            "--settings-file",
            default=DEFAULT_CLAUDE_SETTINGS,
            help=f"Settings file to change ({DEFAULT_CLAUDE_SETTINGS}).",
        )
        parser.add_argument(
            "--token-env",
            default=DEFAULT_TOKEN_ENV,
            help=f"Environment variable the hooks read the token from ({DEFAULT_TOKEN_ENV}).",
        )
        parser.add_argument(
            "--python",
            help=(
                "Interpreter (3.9+) for the SessionStart and PreCompact command hooks, written "
                "as given (default: the real binary behind the one running this command)."
            ),
        )
        parser.add_argument(
            "--uninstall", action="store_true", help="Remove Signet's hooks, keep the rest."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        settings_path = Path(options["settings_file"]).expanduser()
        try:
            if options["uninstall"]:
                result = uninstall_claude_code(settings_path)
            else:
                result = install_claude_code(
                    settings_path,
                    url=options["url"],
                    token_env=options["token_env"],
                    interpreter=options["python"],
                )
        except InstallError as exc:
            raise CommandError(str(exc)) from exc
        self._report(result, uninstall=options["uninstall"], token_env=options["token_env"])

    def _report(self, result: InstallResult, *, uninstall: bool, token_env: str) -> None:
        path = result.settings_path
        if uninstall:
            if not result.changed:
                self.stdout.write(f"No Signet hooks in {path}; nothing changed.")
                return
            self.stdout.write(self.style.SUCCESS(f"Removed Signet's hooks from {path}"))
            self.stdout.write(f"  events: {', '.join(result.removed)}")
        else:
            if not result.changed:
                self.stdout.write(f"Signet's hooks in {path} are already up to date.")
            else:
                verb = "Created" if result.created else "Updated"
                self.stdout.write(self.style.SUCCESS(f"{verb} {path}"))
                self.stdout.write(f"  events: {', '.join(result.installed)}")
                if result.removed:
                    self.stdout.write(
                        f"  replaced earlier Signet entries in: {', '.join(result.removed)}"
                    )
                # Pinned by path: removing that Python breaks the hook until the next install.
                self.stdout.write(f"  SessionStart and PreCompact run with: {result.interpreter}")
        if result.backup_path is not None:
            self.stdout.write(f"  backup: {result.backup_path}")
        if not uninstall:
            self.stdout.write(
                f"Claude Code must see the token in its environment: export {token_env}=... "
                "(create one with: python manage.py create_token --user NAME --scopes ingest,read)"
            )
