"""Recovery: find the checkpoint a (re)starting session should continue from, and render
the ``## Session Recovery Context`` within its budget.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import Any
from urllib.parse import quote

from django.contrib.auth.models import User
from django.db import connections, router
from django.db.models import Field

from checkpoints.models import (
    HARNESS_CONTEXT_CAP_CHARS,
    Checkpoint,
    ContinuityConfig,
    Injection,
    Session,
    Trigger,
)
from checkpoints.services.redaction import redact
from checkpoints.services.statements import (
    Statement,
    statement_build,
    statement_run,
    statement_values,
)
from checkpoints.services.text import shorten
from hooks.transcripts.prompts import goal_worthy

HEADER = "## Session Recovery Context"
GOAL = "Goal"  # the section that always comes first
NOW = "Now"  # first when there is no goal
MIN_LEAD_CHARS = 60
GOAL_CHARS = 400  # the goal's cap, or a quarter of the budget when larger (half, at most)
KEY_SHOWN_CHARS = 40  # session keys can be 255 characters; the header must stay short
ITEM_CHARS = 400
# A next step's, decision's or blocker's line before the sections below it had their share
# (and what is in progress: PROMPT_CHARS); the budget left after every section had its lines
# widens them to ITEM_CHARS.
DETAIL_CHARS = 180
# The first pass gives each section its first lines up to about this many characters (at
# least one line): in a tight budget every kind of fact is there before one gets five lines.
SHARE_CHARS = 240
# The second pass gives each section its quota of lines up to about this many characters:
# five long lines of one kind do not crowd out the last of another's short ones.
QUOTA_CHARS = 400
PROMPT_CHARS = 300
QUOTE_CHARS = 300
MAX_QUOTED_LINES = 40  # never more candidate lines of a message or summary than this
CLOSING_LINES = 6  # the last lines of a message's final paragraph, kept before its opening
ELISION = "> …"  # between the opening and the closing lines of a message
CUT_MIN_CHARS = 200  # a text that starts a longer one is the same fact cut, from this long
# A session in the project is chosen by substance as well as by time: the newest of the
# project's newest checkpoints that shows work (``substantive``), else the newest of them.
PROJECT_CANDIDATES = 20
SUBSTANTIVE_PROMPTS = 2


@dataclass(frozen=True)
class RecoveryMatch:
    checkpoint: Checkpoint
    match: str  # "session", "lineage" or "project"
    # The harness's compaction summary of the checkpoint's session, for another session
    # recovering from it (a "session" match's agent already has it in its conversation).
    compact_summary: str = ""
    # Newer checkpoints of the project passed over for having less in them ("project").
    passed_over: int = 0


@dataclass(frozen=True)
class RecoveryContext:
    text: str
    omitted: list[str] = field(default_factory=list)


def recovery_find(
    *,
    owner: User,
    session: Session,
    config: ContinuityConfig,
    now: datetime,
    previous_session_key: str = "",
    latest: Checkpoint | None = None,
) -> RecoveryMatch | None:
    """The checkpoint to recover from, in order: this session's own latest (no time window:
    this is what survives ``/compact``), the explicit predecessor's latest, then a recent one
    of the same project, chosen by substance as well as by time (``recovery_find_project``),
    so a throwaway session (one ``ping``) does not become the project's memory. None when
    there is nothing to recover.
    ``latest`` is the session's own latest when the event recovering writes one, built and
    not saved yet (its transaction saves it before the injection that refers to it).

    For another session's checkpoint, its session's compaction summary comes in the same
    query (a join on the session's primary key), so recovery costs no extra query. A session
    created by this very event (``Session.created_now``) has no checkpoint of its own to look
    for.
    """
    # Newest first; two checkpoints of one instant (a frozen clock, a coarse one) go by their
    # time-ordered ids, the later written first.
    if latest is not None:
        return RecoveryMatch(latest, "session")
    own = None if session.created_now else next(_newest(_OWN, owner.pk, session.session_key), None)
    if own is not None:
        return RecoveryMatch(own[0], "session")
    previous_key = previous_session_key or (
        session.previous_session.session_key if session.previous_session is not None else ""
    )
    if previous_key:
        previous = next(_newest(_LINEAGE, owner.pk, previous_key), None)
        if previous is not None:
            return RecoveryMatch(previous[0], "lineage", previous[1])
    if session.project_normalized:
        return recovery_find_project(
            owner=owner,
            project=session.project_normalized,
            config=config,
            now=now,
            excluded_session_key=session.session_key,
        )
    return None


def recovery_find_project(
    *,
    owner: User,
    project: str,
    config: ContinuityConfig,
    now: datetime,
    excluded_session_key: str = "",
) -> RecoveryMatch | None:
    """The checkpoint a new session in ``project`` recovers from (not one of the session
    ``excluded_session_key``): of the project's ``PROJECT_CANDIDATES`` newest within the
    recovery window, the newest that shows work (``substantive``), else the newest."""
    since = now - config.recovery_window
    candidates = _newest(_PROJECT, owner.pk, since, project, excluded_session_key)
    chosen, passed_over = None, 0
    for number, (checkpoint, summary) in enumerate(candidates):
        if chosen is None:
            chosen = (checkpoint, summary)
        if substantive(checkpoint):
            chosen, passed_over = (checkpoint, summary), number
            break
    if chosen is None:
        return None
    return RecoveryMatch(chosen[0], "project", chosen[1], passed_over=passed_over)


def substantive(checkpoint: Checkpoint) -> bool:
    """Whether ``checkpoint`` shows work worth carrying into another session: prompts, edited
    files, steps or decisions, or a digest the agent (or a client) wrote itself."""
    return bool(
        checkpoint.prompt_count >= SUBSTANTIVE_PROMPTS
        or checkpoint.modified_files
        or checkpoint.next_steps
        or checkpoint.decisions
        or checkpoint.trigger in (Trigger.AGENT, Trigger.EXPLICIT)
    )


# --- recovery_find's look-ups, built once ---------------------------------------------------
# Each is the owner's newest checkpoint that matches (the project's: its newest few), every
# column of it, and for another
# session's checkpoint that session's compaction summary (a join on its primary key); the
# SQL is the ORM's for the same filters, and the same indexes serve it (``Checkpoint.Meta``,
# ``bench/recovery_scale.py``). Built once per database: the ORM compiled the join and its
# annotation anew at every call, about a millisecond of Python each, half of a session's
# first prompt.
_OWN = "own"  # by owner and session key; no join: the session is the one recovering
_LINEAGE = "lineage"  # by owner and session key
_PROJECT = "project"  # by owner, created since, project, and not the session key given


def _columns() -> tuple[Field[Any, Any], ...]:
    return tuple(Checkpoint._meta.concrete_fields)


@cache
def _newest_statement(alias: str, which: str) -> Statement:
    name = connections[alias].ops.quote_name
    table, sessions = name(Checkpoint._meta.db_table), name(Session._meta.db_table)

    def column(attname: str) -> str:
        return f"{table}.{name(attname)}"

    owner, key = f"{column('owner_id')} = %s", column("session_key")
    where = {
        _OWN: [owner, f"{key} = %s"],
        _LINEAGE: [owner, f"{key} = %s"],
        _PROJECT: [
            owner,
            f"{column('created_at')} >= %s",
            f"{column('project_normalized')} = %s",
            f"NOT ({key} = %s)",
        ],
    }[which]
    selected = [column(str(field.column)) for field in _columns()]
    joined = ""
    if which != _OWN:
        selected.append(f"{sessions}.{name('compact_summary')}")
        joined = f" INNER JOIN {sessions} ON ({column('session_id')} = {sessions}.{name('id')})"
    return statement_build(
        alias=alias,
        sql=(
            f"SELECT {', '.join(selected)} FROM {table}{joined} "  # noqa: S608
            f"WHERE ({' AND '.join(where)}) "
            f"ORDER BY {column('created_at')} DESC, {column('id')} DESC "
            f"LIMIT {PROJECT_CANDIDATES if which == _PROJECT else 1}"
        ),
        returns_rows=True,
    )


def _newest(which: str, *params: Any) -> Iterator[tuple[Checkpoint, str]]:
    """The newest checkpoints the ``which`` look-up finds with ``params`` (in the order its
    comment names them; a time is prepared as the ORM prepares one for the column), newest
    first, each loaded as the ORM loads one when the caller gets to it, with its session's
    compaction summary ('' for ``_OWN``)."""
    alias = router.db_for_read(Checkpoint) or "default"
    connection = connections[alias]
    prepared = [
        Checkpoint._meta.get_field("created_at").get_db_prep_value(value, connection)
        if isinstance(value, datetime)
        else value
        for value in params
    ]
    statement = _newest_statement(alias, which)
    rows = statement_run(statement=statement, params=prepared, connection=connection).rows
    fields = _columns()
    for row in rows:
        values = statement_values(connection=connection, fields=fields, row=row[: len(fields)])
        checkpoint = Checkpoint.from_db(alias, list(values), list(values.values()))
        summary = row[len(fields)] if which != _OWN else ""
        yield checkpoint, summary or ""


def _age(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 90:
        return "just now"
    minutes = seconds // 60
    if minutes < 90:
        return f"{minutes} min ago"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h ago"
    return f"{hours // 24} days ago"


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _shorten_sentence(text: str, limit: int) -> str:
    """``text`` within ``limit`` chars, cut after the last sentence that ends in its second
    half, else at a word boundary, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 2)]
    end = max(cut.rfind(mark) for mark in (". ", "! ", "? ", ".) "))
    if end >= limit // 2:
        return cut[: end + 1] + " …"
    return shorten(text, limit)


def _shorten_start(text: str, limit: int) -> str:
    """``text`` within ``limit`` chars, its start cut at a word boundary: a closing line's
    end (a question, the next step) is what matters."""
    if len(text) <= limit:
        return text
    cut = text[len(text) - max(0, limit - 1) :]
    if " " in cut[: limit // 2]:
        cut = cut[cut.find(" ") + 1 :]
    return "…" + cut


def _clean(text: str, limit: int, *, keep_end: bool = False) -> str:
    """One line of at most ``limit`` chars, redacted before it is cut (a cut secret may no
    longer look like one)."""
    if keep_end:
        return _shorten_start(" ".join(redact(text[-(limit * 4 + 256) :]).split()), limit)
    return shorten(" ".join(redact(text[: limit * 4 + 256]).split()), limit)


ANSWER = " → "  # between a question the agent asked and the user's answer, in a decision
_PARTS = re.compile(r"\n|; ")  # how a text's lines or bullets were joined into one item


def _clean_item(text: str, limit: int, whole: int) -> str:
    """An item of the agent's or a summary's as one line of at most ``limit`` chars, redacted.
    An item of several lines or bullets joined (by '; ': a summary's paragraph, a task with
    its description) and longer than ``whole`` is its first one (with the next when the
    first only introduces it, "…:"). When it is longer than ``limit``: a question's answer
    keeps more of the room than the question; the rest is cut at a word boundary."""
    text = redact(text[: limit * 4 + 256])
    flat = " ".join(text.split())
    if len(flat) <= min(limit, whole):
        return flat
    if ANSWER in flat:
        if len(flat) <= limit:
            return flat
        question, _, answer = flat.partition(ANSWER)
        room = limit - len(ANSWER)
        question = shorten(question, max(room - len(answer), min(len(question), room // 3)))
        return f"{question}{ANSWER}{shorten(answer, max(1, room - len(question)))}"
    parts = [" ".join(part.split()) for part in _PARTS.split(text)]
    parts = [part for part in parts if part]
    if len(parts) > 1:
        flat = parts[0]
        if flat.endswith(":") and not parts[1].startswith("`"):
            flat = f"{flat} {parts[1]}"
    return shorten(flat, limit)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


@dataclass(frozen=True)
class _Section:
    title: str
    lines: list[str]  # the lines that could ever be shown, redacted, most wanted first
    quota: int  # lines it gets before any section gets more than its quota
    total: int  # items in all, of which ``lines`` is the head
    # Where each line stands in the text it quotes, when that is not the order of ``lines``
    # (a message's closing lines come first); a gap between two shown is marked.
    positions: tuple[int, ...] = ()
    # Each line at its widest, when the budget left allows it (``lines`` hold them shorter).
    wide: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.title.lower()

    def shown(self, kept: int) -> list[str]:
        """The first ``kept`` of ``lines``, as they are shown."""
        if not self.positions:
            return self.lines[:kept]
        placed = sorted(zip(self.positions[:kept], self.lines[:kept], strict=True))
        shown: list[str] = []
        previous = -1
        for position, line in placed:
            if position > previous + 1:
                shown.append(ELISION)
            shown.append(line)
            previous = position
        return shown


def _listed(
    title: str,
    items: Sequence[str],
    *,
    quota: int,
    chars: int,
    within: int,
    prefix: str = "- ",
    wide: int = 0,
) -> _Section:
    """A section of one line per item, redacted; only the items that could fit ``within``
    are rendered (the others count in ``total``). With ``wide``, the items are the agent's
    (``_clean_item``), each ``chars`` long at first and up to ``wide`` when room is left."""
    lines: list[str] = []
    wider: list[str] = []
    used = 0
    for item in items:
        line = prefix + (_clean_item(item, chars, chars) if wide else _clean(item, chars))
        used += len(line) + 1
        if used > within:
            break
        lines.append(line)
        if wide:
            wider.append(prefix + _clean_item(item, wide, chars))
    return _Section(title, lines, quota, len(items), wide=tuple(wider))


def _quoted(title: str, text: str, *, quota: int, within: int) -> _Section:
    """A message's lines as a Markdown quote, so its own headings cannot break ours. Only
    the head that could fit ``within`` is redacted and rendered, in whole lines."""
    clip = within * 2 + 256
    head = redact(text[:clip]).splitlines()
    rest = 0
    if len(text) > clip:
        head = head[:-1]  # cut mid-line: it counts with the rest
        rest = 1 + sum(1 for line in text[clip:].splitlines()[1:] if line.strip())
    lines = [f"> {_clean(line, QUOTE_CHARS)}" for line in head if line.strip()]
    return _Section(title, lines[:MAX_QUOTED_LINES], quota, len(lines) + rest)


# Claude Code's compaction summary opens with a fixed sentence and its analysis of the
# conversation (an "Analysis:" paragraph, or an <analysis> block), then "Summary:" and the
# numbered sections that say what the session is for and where it stands.
_SUMMARY_ANALYSIS = re.compile(r"<analysis>.*?</analysis>", re.DOTALL | re.IGNORECASE)
_SUMMARY_START = re.compile(
    r"^[ \t#*_]*(?:summary:?|<summary>)[ \t*_]*$", re.IGNORECASE | re.MULTILINE
)
_SUMMARY_PREAMBLE = "This session is being continued from a previous conversation"


def _summary_body(text: str) -> str:
    """A compaction summary without its preamble and analysis: from its "Summary:" line on
    when only they come before it, else without the opening sentence and any <analysis>
    block."""
    text = _SUMMARY_ANALYSIS.sub("", text[:100_000]).lstrip()
    start = _SUMMARY_START.search(text)
    opening = text[: start.start()].lstrip("#*_ \t\n").lower() if start is not None else ""
    if start is not None and (not opening or opening.startswith(("this session", "analysis"))):
        text = text[start.end() :]
    elif text.startswith(_SUMMARY_PREAMBLE):
        text = text.partition("\n")[2]
    return text.replace("</summary>", "").strip()


def _closing_quoted(title: str, text: str, *, quota: int, within: int) -> _Section:
    """A message as a Markdown quote whose closing lines (the last ``CLOSING_LINES`` of its
    final paragraph, where a question or the next step stands) come first, last line first,
    then its opening in order; shown in the message's order, with ``ELISION`` at a gap.
    Only the head and the tail that could fit ``within`` are redacted and rendered."""
    clip = within * 2 + 256
    text = text.rstrip()
    if len(text) <= 2 * clip:
        lines: list[str | None] = list(redact(text).splitlines())
    else:  # a cut line counts with the rest; None stands for what is between head and tail
        lines = [*redact(text[:clip]).splitlines()[:-1], None]
        lines += redact(text[-clip:]).splitlines()[1:]
    # Each line with its place among those that are not blank: a gap is something left out.
    numbered: list[tuple[int, str | None]] = []
    for line in lines:
        if line is None or line.strip():
            numbered.append((len(numbered), line))
    total = sum(1 for line in text.splitlines() if line.strip())
    # The final paragraph: the lines after the last blank one (or the cut), at most a few.
    closing: list[tuple[int, str]] = []
    for line in reversed(lines):
        if line is None or not line.strip() or len(closing) == CLOSING_LINES:
            break
        position = numbered[-1 - len(closing)][0]
        closing.append((position, f"> {_clean(line, QUOTE_CHARS, keep_end=True)}"))
    first_closing = len(numbered) - len(closing)
    opening = [
        (position, f"> {_clean(line, QUOTE_CHARS)}")
        for position, line in numbered[:first_closing]
        if line is not None
    ]
    wanted = (closing + opening)[:MAX_QUOTED_LINES]
    return _Section(
        title,
        [line for _, line in wanted],
        quota,
        total,
        positions=tuple(position for position, _ in wanted),
    )


class _Said:
    """The texts said so far, whitespace-normalised: a text says what one of them does when
    it is the same, or when one is a long text cut shorter (a prompt keeps 500 chars, a goal
    2000). A short one that starts another ("go on", "go on with the signup route") is not."""

    def __init__(self) -> None:
        self.texts: set[str] = set()
        self.long: list[str] = []  # those a cut could have come from, or be

    def add(self, text: str) -> bool:
        """Whether ``text`` is new; if it is, it counts as said."""
        flat = " ".join(text.split())
        if not flat or flat in self.texts:
            return False
        if len(flat) >= CUT_MIN_CHARS:
            if any(flat.startswith(old) or old.startswith(flat) for old in self.long):
                return False
            self.long.append(flat)
        self.texts.add(flat)
        return True


def _is_note(prompt: str, notes: Sequence[str]) -> bool:
    """Whether ``prompt`` only made a note (``# …``, ``/remember …``) shown among the notes."""
    prompt = prompt.strip()
    return any(prompt.endswith(note) and len(prompt) - len(note) <= 10 for note in notes)


# A home folder a project path starts with: macOS's and Linux's.
_HOME = re.compile(r"^(?P<home>/Users/(?!Shared/)[^/]+|/home/[^/]+)/")


def _path_prefix(folder: str) -> re.Pattern[str]:
    """``folder/`` where it starts a path in a text, not the middle of another path."""
    return re.compile(r"(?<![\w./~-])" + re.escape(folder) + r"/(?=[^\s/])")


def _relative_to(project: str) -> Callable[[str], str]:
    """A function that names the paths under ``project`` relative to it, wherever they stand
    in a text (absolute project paths were a seventh of the budget on real sessions), and
    the paths under the home folder the project is in as ``~/…``."""
    if not posixpath.isabs(project) or posixpath.dirname(project) == project:
        return lambda text: text
    project = project.rstrip("/")
    inside = _path_prefix(project)
    found = _HOME.match(project + "/")
    home = found["home"] if found and found["home"] != project else ""
    around = _path_prefix(home) if home else None

    def relative(text: str) -> str:
        if project in text:
            text = inside.sub("", text)
        if around is not None and home in text:
            text = around.sub("~/", text)
        return text

    return relative


def _sections(checkpoint: Checkpoint, compact_summary: str, within: int) -> list[_Section]:
    """The sections with content, in priority order (see the README's "The recovery context").
    Each fact is said once: an item that says what a section above it said is left out."""
    # The project key is the git top-level when the client knew it, else the working folder.
    relative = _relative_to(checkpoint.project_normalized)
    notes = _unique(relative(note) for note in reversed(checkpoint.recent_remembers))
    requests = [
        relative(p)
        for p in _unique(reversed(checkpoint.recent_prompts))
        if not _is_note(p, notes)  # newest first
    ]
    said = _Said()

    def new(items: Iterable[str]) -> list[str]:
        return [item for item in _unique(relative(item) for item in items) if said.add(item)]

    # The goal is what the session is for, else the oldest request kept; the task in
    # progress and what the user asked last follow it, each unless it says the same.
    goal = new([checkpoint.goal or (requests[-1] if requests else "")])
    now = new([checkpoint.current_task])
    # What the user asked last that says something: "continue", "ok" after a compaction
    # are not worth a line, nor pushing the real request out.
    requests = [request for request in requests if goal_worthy(request)]
    latest = new(requests[:1])
    lead = goal or now
    lead_line = _clean(lead[0], 1000) if lead else ""
    steps = new(checkpoint.next_steps)
    decisions = new(checkpoint.decisions)
    blockers, questions = new(checkpoint.blockers), new(checkpoint.open_questions)
    concerns = [f"Blocker: {item}" for item in blockers] + [f"Open: {item}" for item in questions]
    notes = new(notes)
    earlier = new(requests)
    files = _unique(relative(path) for path in reversed(checkpoint.modified_files))
    sections = [
        _Section(GOAL if goal else NOW, [lead_line] if lead_line else [], 1, 1 if lead_line else 0),
        _listed(
            NOW,
            now if goal else [],
            quota=1,
            chars=PROMPT_CHARS,
            within=within,
            wide=ITEM_CHARS,
            prefix="",
        ),
        _listed("Latest request", latest, quota=1, chars=PROMPT_CHARS, within=within, prefix=""),
        _listed("Next steps", steps, quota=5, chars=DETAIL_CHARS, within=within, wide=ITEM_CHARS),
        _listed(
            "Decisions", decisions, quota=5, chars=DETAIL_CHARS, within=within, wide=ITEM_CHARS
        ),
        _listed(
            "Open questions and blockers",
            concerns,
            quota=3,
            chars=DETAIL_CHARS,
            within=within,
            wide=ITEM_CHARS,
        ),
        _listed("Modified files", files, quota=5, chars=ITEM_CHARS, within=within),
        _listed("Remembered notes", notes, quota=3, chars=PROMPT_CHARS, within=within),
        _listed("Recent prompts", earlier, quota=2, chars=PROMPT_CHARS, within=within),
        _closing_quoted(
            "Last assistant message",
            relative(checkpoint.last_assistant_message),
            quota=2,
            within=within,
        ),
        _quoted(
            "Compaction summary", relative(_summary_body(compact_summary)), quota=4, within=within
        ),
    ]
    return [section for section in sections if section.total]


@dataclass(frozen=True)
class _Frame:
    """What surrounds the sections: the head lines, and the wording of the omitted line."""

    head: list[str]
    footer: Callable[[list[str]], str]


def _frames(
    *, checkpoint: Checkpoint, match: str, now: datetime, current_branch: str, passed_over: int
) -> list[_Frame]:
    """The frames from the fullest to the tersest: a small budget goes to the goal, not to
    saying where the context came from. Every frame but the tersest names the branch the
    checkpoint was taken on, and warns when it is not the current one; another session's
    checkpoint is named too."""
    trigger = checkpoint.get_trigger_display().lower()
    where = {"session": "this session", "lineage": "the session this one continues"}.get(
        match, "an earlier session in this project"
    )
    key = redact(checkpoint.session_key)
    age = _age(now - checkpoint.created_at)
    count = checkpoint.prompt_count
    branch = checkpoint.git_branch
    on = f" on `{branch}`" if branch else ""
    short_on = f" on `{shorten(branch, 60)}`" if branch else ""
    full = [
        HEADER,
        f"Recovered from {_article(trigger)} {trigger} checkpoint of {where} "
        f"(`{shorten(key, KEY_SHOWN_CHARS)}`), taken {age}{on} "
        f"after {count} prompt{'' if count == 1 else 's'}.",
    ]
    named_key = "" if match == "session" else f" (`{shorten(key, 16)}`)"
    short = [
        HEADER,
        f"From {_article(trigger)} {trigger} checkpoint of {where}{named_key}, {age}{short_on}.",
    ]
    if passed_over:
        full.append(
            f"Chosen over {passed_over} newer checkpoint{'' if passed_over == 1 else 's'} "
            "of this project with less work in them."
        )
    if current_branch and branch and current_branch != branch:
        full.append(
            f"Warning: you are on `{current_branch}`, another branch. Check before relying on it."
        )
        short.append(f"Warning: you are on `{shorten(current_branch, 60)}`.")
    full = [redact(line) for line in full]
    short = [redact(line) for line in short]
    path = quote(key[: KEY_SHOWN_CHARS * 2])

    def listed(names: list[str]) -> str:
        return (
            f"_Omitted for space: {', '.join(names)}. Full checkpoint: "
            f"GET /api/checkpoints/{path}/latest/_"
        )

    def named(names: list[str]) -> str:
        return f"_Omitted for space: {', '.join(names)}._"

    def counted(names: list[str]) -> str:
        return f"_Omitted for space: {len(names)} section{'' if len(names) == 1 else 's'}._"

    return [
        _Frame(full, listed),
        _Frame(short, named),
        _Frame(short, counted),
        _Frame([HEADER], counted),
    ]


class _Fit:
    """Which lines of each section a frame keeps within the budget, with exact lengths."""

    def __init__(self, frame: _Frame, sections: list[_Section]) -> None:
        self.frame = frame
        self.sections = list(sections)
        self.kept = [0] * len(sections)
        self.sizes = [0] * len(sections)  # characters of the kept lines, newline each
        self.lead_shortened = False
        self.lead_room = 0  # characters the lead (the goal, else now) could have had
        self.head_chars = len("\n".join(frame.head))

    def omitted(self) -> list[str]:
        names = [f"{self.sections[0].name} (shortened)"] if self.lead_shortened else []
        for section, kept in zip(self.sections, self.kept, strict=True):
            if kept < section.total:
                names.append(
                    section.name if not kept else f"{section.name} ({section.total - kept} more)"
                )
        return names

    def footer_chars(self) -> int:
        omitted = self.omitted()
        return 2 + len(self.frame.footer(omitted)) if omitted else 0

    def length(self) -> int:
        """``len(self.text())``, without building it."""
        body = sum(
            2 + len(f"### {section.title}") + size
            for section, kept, size in zip(self.sections, self.kept, self.sizes, strict=True)
            if kept
        )
        return self.head_chars + body + self.footer_chars()

    def add(self, index: int, limit: int) -> bool:
        """Keep the next line of section ``index`` if the whole still fits in ``limit``."""
        section, kept = self.sections[index], self.kept[index]
        if kept >= len(section.lines):
            return False
        size = self.sizes[index]
        self.kept[index] += 1
        self.sizes[index] = sum(1 + len(line) for line in section.shown(kept + 1))
        if self.length() <= limit:
            return True
        self.kept[index], self.sizes[index] = kept, size
        return False

    def place_lead(self, limit: int, cap: int) -> None:
        """The lead first (the goal, else what is in progress), shortened to at most ``cap``
        and to what is left with everything else omitted."""
        if not self.sections or self.sections[0].title not in (GOAL, NOW):
            return
        lead = self.sections[0]
        line = lead.lines[0]
        self.sections[0] = _Section(lead.title, [""], lead.quota, lead.total)
        self.kept[0], self.sizes[0] = 1, 1
        self.lead_room = min(limit - self.length(), cap)
        if len(line) > self.lead_room:
            self.lead_shortened = True  # which lengthens the omitted line
            self.lead_room = min(limit - self.length(), cap)
            line = _shorten_sentence(line, max(1, self.lead_room))
        self.sections[0] = _Section(lead.title, [line], lead.quota, lead.total)
        self.sizes[0] = 1 + len(line)

    def had(self, index: int, chars: int) -> bool:
        """Whether section ``index`` has had its share of ``chars``: its next line would take
        it past them (its first line it always may have)."""
        section, kept = self.sections[index], self.kept[index]
        return bool(kept) and sum(1 + len(line) for line in section.shown(kept + 1)) > chars

    def widen(self, index: int, limit: int) -> None:
        """Section ``index``'s kept lines at their widest, each if the whole still fits."""
        section = self.sections[index]
        for number, wide in enumerate(section.wide[: self.kept[index]]):
            if wide == section.lines[number]:
                continue
            lines = list(section.lines)
            lines[number] = wide
            wider = _Section(section.title, lines, section.quota, section.total, wide=section.wide)
            size = self.sizes[index]
            self.sections[index] = wider
            self.sizes[index] = sum(1 + len(line) for line in wider.shown(self.kept[index]))
            if self.length() <= limit:
                section = wider
            else:
                self.sections[index], self.sizes[index] = section, size

    def fill(self, limit: int) -> None:
        """Every section its first lines (up to ``SHARE_CHARS``) in priority order, then its
        quota (up to ``QUOTA_CHARS``), then the rest in the same order; then its lines at
        their widest. A section
        keeps a run of its first lines, and none appears while one above it is missing: a
        short line of a lesser section never stands in for a whole section."""
        for chars in (SHARE_CHARS, QUOTA_CHARS, 0):
            for index, section in enumerate(self.sections):
                upto = min(section.quota, len(section.lines)) if chars else len(section.lines)
                while self.kept[index] < upto:
                    if chars and self.had(index, chars):
                        break
                    if not self.add(index, limit):
                        break
                if not self.kept[index]:
                    break
        for index in range(len(self.sections)):
            self.widen(index, limit)

    def overhead(self) -> int:
        return self.head_chars + self.footer_chars()

    def text(self) -> str:
        lines = list(self.frame.head)
        for section, kept in zip(self.sections, self.kept, strict=True):
            if kept:
                lines += ["", f"### {section.title}", *section.shown(kept)]
        omitted = self.omitted()
        if omitted:
            lines += ["", self.frame.footer(omitted)]
        return "\n".join(lines)


def recovery_render(
    *,
    checkpoint: Checkpoint,
    match: str,
    config: ContinuityConfig,
    now: datetime,
    current_branch: str = "",
    budget: int | None = None,
    compact_summary: str = "",
    passed_over: int = 0,
) -> RecoveryContext:
    """Render the recovery context for ``checkpoint`` in at most ``budget`` characters.

    The budget is the configured recovery budget, itself reserved inside the inject budget
    and below the harness cap. The goal (else what is in progress) comes first whatever the
    budget, shortened if need be (to at most a quarter of the budget or GOAL_CHARS, and half
    of it). Every section then gets its first lines (about SHARE_CHARS), then its first few
    (``quota``, about QUOTA_CHARS) in priority order, and the budget left goes to the rest in
    the same order, then to widening the items shown shorter; sections are cut at line
    boundaries, none appears while one above it is missing, and the last line says what did
    not fit (and, with room, where to get it). The frame (where the checkpoint came from, the
    omitted line) gets terser as the budget shrinks: it may take at most a third of it,
    unless everything fits anyway.
    """
    limit = min(
        budget if budget is not None else config.recovery_budget_chars,
        config.recovery_budget_chars,
        config.inject_budget_chars,
        HARNESS_CONTEXT_CAP_CHARS - 1,
    )
    sections = _sections(checkpoint, compact_summary, limit)
    # A goal can be a long paragraph (a summary's request): it has a quarter of the budget,
    # at least GOAL_CHARS, at most half (what the smallest budget gives it).
    lead_cap = max(MIN_LEAD_CHARS, min(limit // 2, max(GOAL_CHARS, limit // 4)))
    wanted_lead = (
        min(len(sections[0].lines[0]), lead_cap)
        if sections and sections[0].title in (GOAL, NOW)
        else 0
    )
    frames = _frames(
        checkpoint=checkpoint,
        match=match,
        now=now,
        current_branch=current_branch,
        passed_over=passed_over,
    )
    for frame in frames:
        fit = _Fit(frame, sections)
        fit.place_lead(limit, lead_cap)
        fit.fill(limit)
        if not fit.omitted():
            break
        if fit.overhead() * 3 <= limit and fit.lead_room >= wanted_lead:
            break
    text = fit.text()
    if len(text) > limit:  # only a budget below the allowed minimum gets here
        text = text[: text.rfind("\n", 0, limit)] if "\n" in text[:limit] else text[:limit]
    return RecoveryContext(text=text, omitted=fit.omitted())


def recovery_prepare(
    *,
    owner: User,
    session: Session,
    config: ContinuityConfig,
    now: datetime,
    previous_session_key: str = "",
    budget: int | None = None,
    latest: Checkpoint | None = None,
    conversation_kept: bool = False,
) -> tuple[RecoveryMatch, RecoveryContext] | None:
    """Find the checkpoint ``session`` would recover from (``recovery_find``) and render its
    context; None when there is none, or when the conversation already holds it.

    ``conversation_kept``: the harness brought the session's conversation back as it was
    (``Event.conversation_kept``). It holds what the session's own checkpoint says (that is
    where the checkpoint came from) and any recovery context injected into the session
    before: a block saying it again would only pile up, one more at every resume.
    """
    match = recovery_find(
        owner=owner,
        session=session,
        config=config,
        now=now,
        previous_session_key=previous_session_key,
        latest=latest,
    )
    if match is None:
        return None
    if conversation_kept and (match.match == "session" or _injected_before(session)):
        return None
    context = recovery_render(
        checkpoint=match.checkpoint,
        match=match.match,
        config=config,
        now=now,
        current_branch=session.git_branch,
        budget=budget,
        compact_summary=match.compact_summary,
        passed_over=match.passed_over,
    )
    return match, context


def _injected_before(session: Session) -> bool:
    """Whether ``session`` was handed a recovery context before."""
    if session.created_now or session.pk is None:
        return False
    return Injection.objects.filter(session_id=session.pk).exists()


def injection_build(
    *, session: Session, context: RecoveryContext, match: RecoveryMatch, source: str, now: datetime
) -> Injection:
    """The audit of what is injected into ``session``, unsaved: the engine saves it in the
    transaction that writes the session row, so it is kept if and only if the row is."""
    return Injection(
        session=session,
        checkpoint=match.checkpoint,
        source=source[:32],
        match=match.match,
        content=context.text,
        size_chars=len(context.text),
        omitted=context.omitted,
        created_at=now,
    )
