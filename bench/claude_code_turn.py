"""What Signet's hooks add to a real Claude Code turn and compaction: the server up, down, hung.

Drives the real CLI (the pinned npm package, ``tests/claude_cli.py``) headless against the
stand-in model API (``tests/model_api.py``): per round, a one-response turn
(``claude -p PROMPT``) and a compaction of that session (``claude -p /compact --resume SID``)
in each of these settings, interleaved, each in a HOME of its own:

- no hooks (the baseline);
- no-op command hooks: the same events and matchers, each ``cat > /dev/null`` (what Claude
  Code's running of a command costs);
- Signet's hooks as ``manage.py install_hooks claude-code --no-mcp`` writes them, against the
  service started as ``make run`` does (SQLite), against a closed port (connection refused),
  and against a socket that accepts and never answers (hung): once as the first hook of the
  minute to find it hung (its mark removed before each run), once within the minute (the
  mark fresh, as a hook a moment before left it).

Prints the median wall time of each and what it adds to the baseline's median, judged for
the hung service against issue #29's goal: at most 1.5 s a turn, 3 s a compaction.

    .venv/bin/python bench/claude_code_turn.py [--rounds 5]

Needs npm (or the CLI already in the cache, ``SIGNET_CLI_CACHE``); takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "signet_site.settings")

import django  # noqa: E402

django.setup()

from bench.service import free_port, running_service  # noqa: E402
from hooks.install import CLAUDE_CODE_EVENTS  # noqa: E402
from tests.claude_cli import (  # noqa: E402
    CLAUDE_CODE_VERSION,
    PACKAGE,
    ClaudeCode,
    HungServer,
    git_project,
    npm_install,
)
from tests.model_api import ModelAPI  # noqa: E402

GOAL_TURN_SECONDS = 1.5
GOAL_COMPACTION_SECONDS = 3.0
BASELINE = "no hooks (baseline)"
HUNG_FIRST = "Signet, server hung: first hook of the minute"
HUNG_MINUTE = "Signet, server hung: within the minute"


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def noop_settings() -> dict[str, Any]:
    """The events and matchers Signet installs, each running a command that does nothing."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, matcher, timeout, _ in CLAUDE_CODE_EVENTS:
        group: dict[str, Any] = {
            "hooks": [{"type": "command", "command": "cat > /dev/null", "timeout": timeout}]
        }
        if matcher:
            group["matcher"] = matcher
        hooks.setdefault(event, []).append(group)
    return {"hooks": hooks}


class Setting:
    """One column of the comparison: a HOME with its settings, and its runs' times."""

    def __init__(
        self, name: str, cli: ClaudeCode, *, url: str = "", fresh_mark: bool | None = None
    ) -> None:
        self.name = name
        self.cli = cli
        self.url = url
        # True: the mark of a hung server is fresh before each run; False: removed.
        self.fresh_mark = fresh_mark
        self.turns: list[float] = []
        self.compactions: list[float] = []

    def prepare(self) -> None:
        if self.fresh_mark is None:
            return
        marker = Path(self.cli.env["SIGNET_OUTBOX"] + ".down")
        if self.fresh_mark:
            marker.write_text(f"{self.url}/api/hooks/claude-code/")
        else:
            marker.unlink(missing_ok=True)

    def round(self) -> None:
        self.prepare()
        turn = self.cli.run("Say hello")
        if turn.returncode != 0:
            raise SystemExit(f"{self.name}: the turn failed: {turn.stderr[-500:]}")
        self.turns.append(turn.seconds)
        self.prepare()
        compacted = self.cli.run("/compact", "--resume", turn.session_id)
        if compacted.returncode != 0:
            raise SystemExit(f"{self.name}: the compaction failed: {compacted.stderr[-500:]}")
        self.compactions.append(compacted.seconds)


def setting(
    name: str,
    folder: Path,
    executable: Path,
    model: ModelAPI,
    project: Path,
    *,
    token: str = "",
    url: str = "",
    settings: dict[str, Any] | None = None,
    fresh_mark: bool | None = None,
) -> Setting:
    home = folder / f"home-{len(list(folder.glob('home-*')))}"
    (home / ".claude").mkdir(parents=True)
    cli = ClaudeCode(
        executable=executable,
        home=home,
        project=project,
        model=model,
        env={"SIGNET_TOKEN": token or "sig_none", "SIGNET_OUTBOX": str(home / "outbox.jsonl")},
    )
    if settings is not None:
        cli.settings_file.write_text(json.dumps(settings))
    else:
        cli.install_hooks(url, "--no-mcp")
    return Setting(name, cli, url=url, fresh_mark=fresh_mark)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each setting")
    args = parser.parse_args()
    try:
        executable = npm_install(PACKAGE, CLAUDE_CODE_VERSION, binary="claude")
    except BaseException as exc:  # pytest's skip, outside pytest
        raise SystemExit(f"the Claude Code CLI is not available: {exc}") from None
    model = ModelAPI().start()
    hung = HungServer(lifetime=3600)
    closed = f"http://127.0.0.1:{free_port()}"
    try:
        with (
            tempfile.TemporaryDirectory(prefix="signet-cc-turn-") as folder_name,
            running_service() as service,
        ):
            folder = Path(folder_name)
            project = git_project(folder / "invoices")

            def make(name: str, **kwargs: Any) -> Setting:
                return setting(name, folder, executable, model, project, **kwargs)

            settings = [
                make(BASELINE, settings={}),
                make("no-op command hooks", settings=noop_settings()),
                make("Signet, server up", token=service.token, url=service.url),
                make("Signet, server down (refused)", url=closed),
                make(HUNG_FIRST, url=hung.url, fresh_mark=False),
                make(HUNG_MINUTE, url=hung.url, fresh_mark=True),
            ]
            started = time.monotonic()
            for number in range(args.rounds):
                # Each round starts one setting further on: no setting always runs first.
                shift = number % len(settings)
                for each in settings[shift:] + settings[:shift]:
                    each.round()
            took = time.monotonic() - started
    finally:
        hung.stop()
        model.stop()
    report(settings, args.rounds, took)


def report(settings: list[Setting], rounds: int, took: float) -> None:
    base = settings[0]
    turn0 = statistics.median(base.turns)
    compact0 = statistics.median(base.compactions)
    print(
        f"Claude Code {CLAUDE_CODE_VERSION}, headless: a one-response turn and its /compact, "
        f"{rounds} rounds interleaved ({took:.0f} s); medians"
    )
    print(f"  {'':48} {'turn':>7} {'added':>7}   {'/compact':>8} {'added':>7}")
    added: dict[str, tuple[float, float]] = {}
    for each in settings:
        turn = statistics.median(each.turns)
        compaction = statistics.median(each.compactions)
        added[each.name] = (turn - turn0, compaction - compact0)
        if each is base:
            print(f"  {each.name:48} {turn:6.2f}s {'':>7}   {compaction:7.2f}s")
        else:
            print(
                f"  {each.name:48} {turn:6.2f}s {turn - turn0:+6.2f}s   "
                f"{compaction:7.2f}s {compaction - compact0:+6.2f}s"
            )
    turn_added, compaction_added = added[HUNG_FIRST]
    print(
        f"  hung service, first hook of the minute: {turn_added:+.2f} s a turn "
        f"(goal <= {GOAL_TURN_SECONDS} s: {verdict(turn_added <= GOAL_TURN_SECONDS)}), "
        f"{compaction_added:+.2f} s a compaction "
        f"(goal <= {GOAL_COMPACTION_SECONDS:.0f} s: "
        f"{verdict(compaction_added <= GOAL_COMPACTION_SECONDS)})"
    )


if __name__ == "__main__":
    main()
