"""Claude Code's side of a hook: settings.json's command for an event, matched as Claude
Code matches, run through ``sh -c`` with the payload on stdin in a HOME of its own; and the
service's clock set to the event's time (``bench/claude_replay.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hooks.install import install_claude_code

# Events whose matcher Claude Code ignores.
UNMATCHED = frozenset({"UserPromptSubmit", "Stop"})
# What a matcher matches, per event (else the tool's name).
MATCHED_FIELD = {
    "SessionStart": "source",
    "PreCompact": "trigger",
    "PostCompact": "trigger",
    "SessionEnd": "reason",
}
EXACT_MATCHER = re.compile(r"[A-Za-z0-9_\- ,|]+")


def matches(matcher: Any, value: str) -> bool:
    """Claude Code's matcher: empty or ``*`` for all, a plain list (``a|b``) exactly, else an
    unanchored regular expression."""
    if matcher in (None, "", "*"):
        return True
    if not isinstance(matcher, str):
        return False
    if EXACT_MATCHER.fullmatch(matcher):
        return value in {part.strip() for part in re.split(r"[|,]", matcher)}
    try:
        return re.search(matcher, value) is not None
    except re.error:
        return False


@dataclass
class HookRun:
    """One hook process: its event, what its matcher saw (source, trigger, reason or tool),
    its wall time, the context it returned and its line on stderr ('' when it delivered)."""

    event: str
    matched: str
    seconds: float
    context: str
    stderr: str


class ServiceClock:
    """The service's clock (``django.utils.timezone.now`` in this process, as the suite's
    ``clock`` fixture sets it), held at each event's time in the transcript: the periodic
    checkpoints' intervals and debounce, the ages a context states and the times the hook
    client sends with what it reads from the transcript then agree, and run at the
    session's own pace, not the replay's (seconds for hours of work). Each walk starts at
    its transcript's beginning again, for an owner of its own."""

    def __init__(self) -> None:
        self.at: datetime | None = None

    def __call__(self) -> datetime:
        return self.at or datetime.now(UTC)

    def install(self) -> None:
        from django.utils import timezone

        timezone.now = self


@dataclass
class Claude:
    """One HOME with the hooks installed, firing events as Claude Code does."""

    home: Path
    token: str
    url: str
    clock: ServiceClock | None = None
    runs: list[HookRun] = field(default_factory=list)

    def __post_init__(self) -> None:
        settings = self.home / ".claude" / "settings.json"
        install_claude_code(settings, url=self.url)
        self.hooks: dict[str, Any] = json.loads(settings.read_text())["hooks"]

    def env(self, cwd: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TZ", "TMPDIR")}
        return {
            **keep,
            "HOME": str(self.home),
            "SIGNET_TOKEN": self.token,
            "CLAUDE_PROJECT_DIR": cwd,
            "CLAUDECODE": "1",
        }

    def fire(self, payload: dict[str, Any], at: datetime | None = None) -> str:
        """Run every command hook settings.json holds for the payload's event and matcher,
        the service's clock at ``at``; the additionalContext they returned, joined ('' for
        none)."""
        if self.clock is not None and at is not None:
            self.clock.at = at
        event = payload["hook_event_name"]
        value = str(payload.get(MATCHED_FIELD.get(event, "tool_name"), ""))
        contexts = []
        for group in self.hooks.get(event, []):
            if event not in UNMATCHED and not matches(group.get("matcher"), value):
                continue
            for handler in group.get("hooks", []):
                if handler.get("type") != "command":
                    continue
                contexts.append(self._run(handler, payload))
        return "\n".join(c for c in contexts if c)

    def _run(self, handler: dict[str, Any], payload: dict[str, Any]) -> str:
        began = time.perf_counter()
        try:
            done = subprocess.run(
                ["sh", "-c", handler["command"]],
                input=json.dumps(payload).encode(),
                capture_output=True,
                env=self.env(payload["cwd"]),
                cwd=self.home,  # Claude Code runs it in the project, which is not here
                timeout=float(handler.get("timeout", 600)),
                check=False,
            )
            stdout, stderr = done.stdout, done.stderr.decode(errors="replace").strip()
        except subprocess.TimeoutExpired:
            stdout, stderr = b"", "timed out (Claude Code's timeout)"
        context = ""
        text = stdout.decode(errors="replace").strip()
        if text.startswith("{"):
            try:
                reply = json.loads(text)
            except ValueError:
                stderr = (stderr + " (stdout not JSON)").strip()
            else:
                specific = reply.get("hookSpecificOutput") if isinstance(reply, dict) else None
                if isinstance(specific, dict):
                    context = str(specific.get("additionalContext") or "")
        elif text:
            context = text  # plain stdout is context too, for SessionStart and prompts
        event = payload["hook_event_name"]
        matched = str(payload.get(MATCHED_FIELD.get(event, "tool_name"), ""))
        self.runs.append(HookRun(event, matched, time.perf_counter() - began, context, stderr))
        return context
