"""Recovery on real Claude Code sessions, scored against key facts written by hand (issue #30).

Each session is ``bench/recovery/sessions/<name>.json``: where its transcript comes from
(``source``: repository, path, commit, licence, sha256, lines, bytes), the line to cut at
(``cut_line``) and the facts someone wrote down from the transcript before looking at any
context, each with ``match`` groups: a fact is carried by a text when every group has an
alternative in it (case-insensitive, whitespace collapsed, a substring).

The transcript is not in the repository: it is read from ``$SIGNET_RECOVERY_CACHE``
(default ``~/.cache/signet-tests/recovery/``) as ``<sha256>.jsonl``; when missing it is
downloaded from the repository's raw file at that commit, and its SHA-256 checked. A
session whose transcript cannot be had is skipped, and the run says why.

Its lines 1..cut_line are replayed through the installed hooks as Claude Code fires them
(``bench/claude_replay.py``), against the service running in this process on a new SQLite
database, its clock held at each event's time in the transcript (``--wall-clock``: left
alone): compaction at the cut (the context SessionStart ``compact`` returns; whether the
prompt after it injected a second block), then a new session in the same project; and,
for another owner, the session dying at the cut and a new session starting at once. Beside
them, two baselines: the last 2,000 characters of the conversation as text (prompts,
responses, tool calls with their inputs) and the last prompt.

    .venv/bin/python bench/recovery_eval.py [--session NAME ...] [--show] [--json]
                                            [--sessions DIR] [--wall-clock]

Prints a Markdown table per session and in total, the facts per kind, the contexts' sizes,
exactly-once, and each session's replay time (one process per hook, as Claude Code runs it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench.claude_hooks import ServiceClock  # noqa: E402
from bench.claude_lines import turn_ended  # noqa: E402
from bench.claude_replay import Contexts, replay  # noqa: E402

SESSIONS = PROJECT / "bench" / "recovery" / "sessions"
RAW_URL = "https://raw.githubusercontent.com/{repository}/{commit}/{path}"
TAIL_CHARS = 2000
# Lines after the cut read to tell whether the turn there had ended (none of their content
# reaches the replay).
LOOKAHEAD_LINES = 200
COLUMNS = (
    ("after_compaction", "after compaction"),
    ("new_after", "new session after it"),
    ("new_after_dead", "new session after a dead one"),
    ("tail", "last 2,000 chars"),
    ("last_prompt", "last prompt"),
)
# Issue #30's goals: the share of the facts a column carries.
GOALS = (
    ("after_compaction", "after compaction", 0.90),
    ("new_after_dead", "new session after a dead one", 0.85),
)
KINDS = ("goal", "latest_request", "now", "modified_files", "decision", "next_step", "branch")


def cache_dir() -> Path:
    return Path(
        os.environ.get("SIGNET_RECOVERY_CACHE") or "~/.cache/signet-tests/recovery"
    ).expanduser()


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def carried(fact: dict[str, Any], text: str) -> bool:
    """Whether every group of the fact's ``match`` has an alternative in ``text``."""
    haystack = normalised(text)
    groups = fact.get("match") or []
    return bool(groups) and all(
        any(normalised(alternative) in haystack for alternative in group) for group in groups
    )


def transcript_lines(session: dict[str, Any]) -> list[str]:
    """The transcript's lines, from the cache or its source (then cached); ValueError with
    the reason when it cannot be had."""
    source = session["source"]
    digest = str(source["sha256"]).lower()
    path = cache_dir() / f"{digest}.jsonl"
    if path.exists():
        data = path.read_bytes()
    else:
        url = RAW_URL.format(**source)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310
                data = response.read()
        except OSError as exc:
            raise ValueError(f"not in {path} and not downloadable ({exc})") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{url} does not have the SHA-256 recorded")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"{path} does not have the SHA-256 recorded")
    return data.decode("utf-8", errors="replace").splitlines()


@dataclass
class Result:
    name: str
    facts: list[dict[str, Any]]
    texts: dict[str, str]
    contexts: Contexts
    seconds: float
    hits: dict[str, list[bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hits = {
            column: [carried(fact, self.texts[column]) for fact in self.facts]
            for column, _ in COLUMNS
        }

    def count(self, column: str, kind: str | None = None) -> tuple[int, int]:
        pairs = [
            hit
            for hit, fact in zip(self.hits[column], self.facts, strict=True)
            if kind is None or fact["kind"] == kind
        ]
        return sum(pairs), len(pairs)

    def hooks(self) -> int:
        return len(self.contexts.compaction_hooks) + len(self.contexts.dead_hooks)

    def hook_ms(self) -> dict[str, float]:
        """The median wall time of each event's hook process, in ms."""
        times: dict[str, list[float]] = {}
        for run in self.contexts.compaction_hooks + self.contexts.dead_hooks:
            times.setdefault(run.event, []).append(run.seconds * 1000)
        return {event: round(statistics.median(found), 1) for event, found in times.items()}

    def queued(self) -> list[str]:
        """The hook runs that did not deliver their event (the client's one line on stderr)."""
        runs = self.contexts.compaction_hooks + self.contexts.dead_hooks
        return [f"{run.event}: {run.stderr}" for run in runs if run.stderr]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "facts": [
                {**fact, "carried": {c: self.hits[c][i] for c, _ in COLUMNS}}
                for i, fact in enumerate(self.facts)
            ],
            "sizes": {column: len(self.texts[column]) for column, _ in COLUMNS},
            "exactly_once": self.contexts.exactly_once,
            "seconds": round(self.seconds, 2),
            "hooks": self.hooks(),
            "hook_ms_median": self.hook_ms(),
            "hook_errors": self.queued(),
            "contexts": self.texts,
        }


def evaluate(
    name: str,
    session: dict[str, Any],
    lines: list[str],
    *,
    url: str,
    tokens: tuple[str, str],
    clock: ServiceClock | None,
) -> Result:
    """Replay one session to its cut and score what each point gave the model; ``clock``,
    installed as the service's, gives each event its time in the transcript."""
    cut = int(session["cut_line"])
    began = time.perf_counter()
    contexts = replay(
        lines[:cut],
        turn_ended=turn_ended(lines[cut : cut + LOOKAHEAD_LINES]),
        url=url,
        tokens=tokens,
        clock=clock,
    )
    seconds = time.perf_counter() - began
    conversation = "\n".join(contexts.conversation)
    texts = {
        "after_compaction": contexts.after_compaction,
        "new_after": contexts.new_after,
        "new_after_dead": contexts.new_after_dead,
        "tail": conversation[-TAIL_CHARS:],
        "last_prompt": contexts.prompts[-1] if contexts.prompts else "",
    }
    return Result(name, list(session.get("facts") or []), texts, contexts, seconds)


def fraction(hit: int, total: int) -> str:
    return f"{hit} / {total} ({100 * hit / total:.0f} %)" if total else "-"


def summed(results: list[Result], column: str, kind: str | None = None) -> tuple[int, int]:
    """Facts carried and facts, over ``results``."""
    counts = [result.count(column, kind) for result in results]
    return sum(hit for hit, _ in counts), sum(total for _, total in counts)


def verdicts(results: list[Result]) -> list[str]:
    """Issue #30's goals, each judged on these results."""
    lines = []
    for column, title, goal in GOALS:
        hit, total = summed(results, column)
        share = hit / total if total else 0.0
        met = "met" if share >= goal else "NOT met"
        judged = f"goal >= {100 * goal:.0f} %: {met}"
        lines.append(f"- {title}: {100 * share:.0f} % of the facts ({judged})")
    ahead = sum(r.count("after_compaction")[0] > r.count("tail")[0] for r in results)
    met = "met" if ahead == len(results) else "NOT met"
    lines.append(
        f"- after compaction ahead of the last 2,000 chars on {ahead} of {len(results)} "
        f"sessions (goal: every one: {met})"
    )
    held = sum(r.contexts.exactly_once for r in results)
    met = "met" if held == len(results) else "NOT met"
    lines.append(f"- exactly once on {held} of {len(results)} compactions (goal: every one: {met})")
    return lines


def table(results: list[Result]) -> str:
    """The Markdown tables: per session and in total, per fact kind, sizes and times."""
    head = "| session | " + " | ".join(title for _, title in COLUMNS) + " | exactly once |"
    rows = [head, "|---" * (len(COLUMNS) + 2) + "|"]
    for result in results:
        cells = [fraction(*result.count(column)) for column, _ in COLUMNS]
        once = "yes" if result.contexts.exactly_once else "**no**"
        rows.append(f"| {result.name} | " + " | ".join(cells) + f" | {once} |")
    totals = [fraction(*summed(results, column)) for column, _ in COLUMNS]
    held = sum(r.contexts.exactly_once for r in results)
    rows.append("| **total** | " + " | ".join(totals) + f" | {held} / {len(results)} |")
    rows += ["", *verdicts(results)]

    kinds = ["", "| fact kind | " + " | ".join(t for _, t in COLUMNS) + " |"]
    kinds.append("|---" * (len(COLUMNS) + 1) + "|")
    for kind in KINDS:
        counts = [summed(results, column, kind) for column, _ in COLUMNS]
        if counts[0][1]:
            kinds.append(f"| {kind} | " + " | ".join(f"{h} / {t}" for h, t in counts) + " |")

    sizes = [
        "",
        "| session | chars after compaction | new session after it | after a dead one "
        "| hooks run | replay seconds | seconds per hook |",
        "|---" * 7 + "|",
    ]
    for result in results:
        per_hook = result.seconds / result.hooks() if result.hooks() else 0.0
        sizes.append(
            f"| {result.name} | {len(result.texts['after_compaction']):,} "
            f"| {len(result.texts['new_after']):,} | {len(result.texts['new_after_dead']):,} "
            f"| {result.hooks()} | {result.seconds:.1f} | {per_hook:.3f} |"
        )
    return "\n".join(rows + kinds + sizes)


def sessions_chosen(folder: Path, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    files = sorted(folder.glob("*.json"))
    chosen = [(f.stem, json.loads(f.read_text())) for f in files if not names or f.stem in names]
    missing = set(names) - {name for name, _ in chosen}
    if missing:
        raise SystemExit(f"no such session in {folder}: {', '.join(sorted(missing))}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", action="append", default=[], help="only this one (repeat)")
    parser.add_argument("--show", action="store_true", help="print each context")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--sessions", type=Path, default=SESSIONS, help="the sessions' folder")
    parser.add_argument(
        "--wall-clock",
        action="store_true",
        help="leave the service on the real clock (the session's hours pass in seconds)",
    )
    args = parser.parse_args(argv)

    runnable: list[tuple[str, dict[str, Any], list[str]]] = []
    for name, session in sessions_chosen(args.sessions, args.session):
        if session.get("harness", "claude-code") != "claude-code":
            print(f"skipped {name}: only Claude Code sessions are replayed", file=sys.stderr)
            continue
        try:
            lines = transcript_lines(session)
        except ValueError as exc:
            print(f"skipped {name}: {exc}", file=sys.stderr)
            continue
        if not 0 < int(session["cut_line"]) <= len(lines):
            print(f"skipped {name}: cut_line is not one of its {len(lines)} lines", file=sys.stderr)
            continue
        runnable.append((name, session, lines))
    if not runnable:
        print("no session to replay", file=sys.stderr)
        return 1

    data = tempfile.mkdtemp(prefix="signet-recovery-eval-")
    from bench.wsgi_service import Service, django_start, owner_token

    django_start(data)
    clock = None if args.wall_clock else ServiceClock()
    if clock is not None:
        clock.install()
    service = Service().start()
    results: list[Result] = []
    try:
        for number, (name, session, lines) in enumerate(runnable):
            tokens = (owner_token(f"compaction{number}"), owner_token(f"dead{number}"))
            result = evaluate(name, session, lines, url=service.url, tokens=tokens, clock=clock)
            results.append(result)
            print(
                f"{name}: {result.seconds:.1f} s, {result.hooks()} hooks "
                f"({result.contexts.compaction_seconds:.1f} s compaction, "
                f"{result.contexts.dead_seconds:.1f} s dead)",
                file=sys.stderr,
            )
            medians = ", ".join(f"{event} {ms:.0f}" for event, ms in result.hook_ms().items())
            print(f"  median ms per hook: {medians}", file=sys.stderr)
            for line in result.queued():
                print(f"  hook said: {line}", file=sys.stderr)
            if args.show:
                show(result, sys.stderr if args.json else sys.stdout)
    finally:
        service.stop()
        shutil.rmtree(data, ignore_errors=True)
    if args.json:
        print(json.dumps([r.as_json() for r in results], indent=2, ensure_ascii=False))
    else:
        print(table(results))
    return 0


def show(result: Result, out: TextIO) -> None:
    """Each context of ``result`` and the facts it missed."""
    for column, title in COLUMNS:
        print(f"\n===== {result.name}: {title} ({len(result.texts[column])} chars)", file=out)
        print(result.texts[column] or "(nothing)", file=out)
        for fact, hit in zip(result.facts, result.hits[column], strict=True):
            if not hit:
                print(f"  MISSED ({fact['kind']}): {fact['fact']}", file=out)
    if result.contexts.continue_prompt:
        print(f"\n===== {result.name}: the prompt after the compaction injected", file=out)
        print(result.contexts.continue_prompt, file=out)


if __name__ == "__main__":
    sys.exit(main())
