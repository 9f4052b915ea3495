"""``manage.py install_hooks {claude-code,codex,gemini} [--url URL] [--settings-file PATH]
[--token-env NAME] [--python PATH] [--no-mcp] [--mcp-config PATH] [--claude-md PATH]
[--uninstall]``: write Signet's hooks into the harness's settings (or take them out).

The settings file defaults to the harness's own: ``~/.claude/settings.json``,
``~/.codex/hooks.json`` (``$CODEX_HOME/hooks.json`` when set) or ``~/.gemini/settings.json``.

For Claude Code it also registers the service's MCP endpoint (``--url`` + ``/mcp/``, an
``http`` server with the token from ``$SIGNET_TOKEN``) in Claude Code's user configuration
(``~/.claude.json``) and writes the instructions that tell the agent when to use its tools
into ``~/.claude/CLAUDE.md``; ``--uninstall`` takes those out too. ``--no-mcp`` leaves both
alone. (``--with-mcp``, from when this was an option, is still accepted.)

A thin wrapper around ``hooks.install``; it touches no database. The file option is not
``--settings``: Django takes that one for every command (it sets DJANGO_SETTINGS_MODULE
before the command is even looked up).
"""

from __future__ import annotations

import argparse
import json
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
from hooks.install_harnesses import (
    DEFAULT_GEMINI_SETTINGS,
    codex_notify_argv,
    default_codex_hooks,
    install_codex,
    install_gemini,
    uninstall_harness,
)
from hooks.install_openclaw import DEFAULT_OPENCLAW_CONFIG, install_openclaw, uninstall_openclaw
from hooks.install_opencode import DEFAULT_OPENCODE_PLUGINS, install_opencode, uninstall_opencode
from hooks.instructions import DEFAULT_CLAUDE_MD, instructions_install, instructions_uninstall
from hooks.mcp_config import DEFAULT_CLAUDE_JSON, mcp_install, mcp_server_entry, mcp_uninstall

NAMES = {"claude-code": "Claude Code", "codex": "Codex", "gemini": "Gemini CLI"}


class Command(BaseCommand):
    help = (
        "Install Signet's hooks into a harness's settings file, merging with what is there "
        "(idempotent, with a backup); --uninstall takes them out again."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "harness", choices=["claude-code", "codex", "gemini", "openclaw", "opencode"]
        )
        parser.add_argument("--url", default=DEFAULT_URL, help=f"Server URL ({DEFAULT_URL}).")
        parser.add_argument(
            "--settings-file",
            help=(
                f"Settings file to change (claude-code: {DEFAULT_CLAUDE_SETTINGS}; codex: "
                f"{default_codex_hooks()}; gemini: {DEFAULT_GEMINI_SETTINGS})."
            ),
        )
        parser.add_argument(
            "--token-env",
            default=DEFAULT_TOKEN_ENV,
            help=f"Environment variable the hooks read the token from ({DEFAULT_TOKEN_ENV}).",
        )
        parser.add_argument(
            "--python",
            help=(
                "Interpreter (3.9+) for the SessionStart, PreCompact and Stop command hooks, "
                "written as given (default: the real binary behind the one running this command)."
            ),
        )
        parser.add_argument(
            "--no-mcp",
            action="store_true",
            help=(
                "claude-code: do not register the service's MCP endpoint in --mcp-config nor "
                "write its instructions into --claude-md (nor remove them with --uninstall)."
            ),
        )
        # The default now; kept so that an older command line still works.
        parser.add_argument("--with-mcp", action="store_true", help=argparse.SUPPRESS)
        parser.add_argument(
            "--mcp-config",
            default=DEFAULT_CLAUDE_JSON,
            help=f"Claude Code configuration holding mcpServers ({DEFAULT_CLAUDE_JSON}).",
        )
        parser.add_argument(
            "--claude-md",
            default=DEFAULT_CLAUDE_MD,
            help=f"Memory file that gets the MCP instructions ({DEFAULT_CLAUDE_MD}).",
        )
        parser.add_argument(
            "--plugin-dir",
            default=DEFAULT_OPENCODE_PLUGINS,
            help=f"opencode: the plugin folder signet.js goes into ({DEFAULT_OPENCODE_PLUGINS}).",
        )
        parser.add_argument(
            "--uninstall",
            action="store_true",
            help="Remove Signet's hooks (and its MCP server and instructions), keep the rest.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        harness = options["harness"]
        if options["with_mcp"] and harness != "claude-code":
            raise CommandError("--with-mcp is for claude-code only.")
        if harness == "openclaw":
            self._openclaw(options)
            return
        if harness == "opencode":
            self._opencode(options)
            return
        defaults = {
            "claude-code": DEFAULT_CLAUDE_SETTINGS,
            "codex": default_codex_hooks(),
            "gemini": DEFAULT_GEMINI_SETTINGS,
        }
        settings_path = Path(options["settings_file"] or defaults[harness]).expanduser()
        install = {
            "claude-code": install_claude_code,
            "codex": install_codex,
            "gemini": install_gemini,
        }[harness]
        try:
            if options["uninstall"]:
                uninstall = uninstall_claude_code if harness == "claude-code" else uninstall_harness
                result = uninstall(settings_path)
            else:
                result = install(
                    settings_path,
                    url=options["url"],
                    token_env=options["token_env"],
                    interpreter=options["python"],
                )
        except InstallError as exc:
            raise CommandError(str(exc)) from exc
        self._report(
            result, uninstall=options["uninstall"], token_env=options["token_env"], harness=harness
        )
        if harness == "claude-code" and not options["no_mcp"]:
            try:
                self._mcp(options)
            except InstallError as exc:
                # The hooks are in place and work without it: say so, and go on.
                done = "removed" if options["uninstall"] else "registered"
                self.stderr.write(f"Signet's MCP server was not {done}: {exc} (--no-mcp skips it).")
        if harness == "codex" and not options["uninstall"]:
            # Older Codex versions have no hooks, only the legacy notify program.
            argv = codex_notify_argv(
                url=options["url"], token_env=options["token_env"], interpreter=result.interpreter
            )
            self.stdout.write(
                "Codex versions without hooks: add to ~/.codex/config.toml instead\n"
                f"  notify = {json.dumps(argv, ensure_ascii=False)}"
            )

    def _openclaw(self, options: dict[str, Any]) -> None:
        # The plugin goes to extensions/ next to --settings-file (OpenClaw's state dir).
        config_path = Path(options["settings_file"] or DEFAULT_OPENCLAW_CONFIG).expanduser()
        try:
            if options["uninstall"]:
                result = uninstall_openclaw(config_path)
            else:
                result = install_openclaw(
                    config_path, url=options["url"], token_env=options["token_env"]
                )
        except InstallError as exc:
            raise CommandError(str(exc)) from exc
        for line in result.report(uninstall=options["uninstall"], token_env=options["token_env"]):
            self.stdout.write(line)

    def _opencode(self, options: dict[str, Any]) -> None:
        plugin_dir = Path(options["plugin_dir"]).expanduser()
        try:
            if options["uninstall"]:
                result = uninstall_opencode(plugin_dir)
            else:
                result = install_opencode(
                    plugin_dir, url=options["url"], token_env=options["token_env"]
                )
        except InstallError as exc:
            raise CommandError(str(exc)) from exc
        path = result.settings_path
        if options["uninstall"]:
            removed = f"Removed Signet's plugin {path}"
            self.stdout.write(removed if result.changed else f"No Signet plugin at {path}.")
            return
        if result.changed:
            self.stdout.write(self.style.SUCCESS(f"Wrote Signet's plugin {path}"))
            self.stdout.write(f"  events: {', '.join(result.installed)}")
        else:
            self.stdout.write(f"Signet's plugin {path} is already up to date.")
        if result.backup_path is not None:
            self.stdout.write(f"  backup: {result.backup_path}")
        self.stdout.write(
            f"OpenCode must see the token in its environment: export {options['token_env']}=... "
            "(create one with: python manage.py create_token --user NAME --scopes ingest,read)"
        )

    def _mcp(self, options: dict[str, Any]) -> None:
        config_path = Path(options["mcp_config"]).expanduser()
        claude_md = Path(options["claude_md"]).expanduser()
        if options["uninstall"]:
            result = mcp_uninstall(config_path)
            changed_md = instructions_uninstall(claude_md)
            verb = (
                "Removed Signet's MCP server from" if result.changed else "No Signet MCP server in"
            )
            self.stdout.write(f"{verb} {result.settings_path}")
            if changed_md:
                self.stdout.write(f"Removed Signet's instructions from {claude_md}")
        else:
            result = mcp_install(config_path, url=options["url"], token_env=options["token_env"])
            changed_md = instructions_install(claude_md)
            if result.changed:
                self.stdout.write(
                    self.style.SUCCESS(f"Registered Signet's MCP server in {result.settings_path}")
                )
                entry = mcp_server_entry(url=options["url"], token_env=options["token_env"])
                self.stdout.write(f"  url: {entry['url']}")
                if result.removed:
                    self.stdout.write("  replaced an earlier Signet entry")
            else:
                self.stdout.write(f"Signet's MCP server in {result.settings_path} is up to date.")
            if changed_md:
                self.stdout.write(f"Wrote Signet's instructions into {claude_md}")
        if result.backup_path is not None:
            self.stdout.write(f"  backup: {result.backup_path}")

    def _report(
        self, result: InstallResult, *, uninstall: bool, token_env: str, harness: str
    ) -> None:
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
                self.stdout.write(f"  All hooks run with: {result.interpreter}")
        if result.backup_path is not None:
            self.stdout.write(f"  backup: {result.backup_path}")
        if not uninstall:
            # session_digest, which the context-pressure reminders ask for, writes.
            scopes = "ingest,read,write" if harness == "claude-code" else "ingest,read"
            self.stdout.write(
                f"{NAMES[harness]} must see the token in its environment: export {token_env}=... "
                f"(create one with: python manage.py create_token --user NAME --scopes {scopes})"
            )
