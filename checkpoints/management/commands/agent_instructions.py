"""``manage.py agent_instructions``: print the instructions that tell an agent when to call
Signet's MCP tools, exactly as the installer writes them (without its marker lines), so the
output can be redirected into a memory file such as ``CLAUDE.md`` or ``AGENTS.md``.

It touches no database.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from hooks.instructions import INSTRUCTIONS


class Command(BaseCommand):
    help = (
        "Print the agent instructions (when to call session_digest and session_recall) as "
        "Markdown, for the agent's memory file."
    )
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        # ending="": the text already ends with its line break; the output is byte-exact.
        self.stdout.write(INSTRUCTIONS, ending="")
