"""Recovery: find the checkpoint a (re)starting session should continue from, and render
the ``## Session Recovery Context`` within its budget.
"""

from __future__ import annotations

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

HEADER = "## Session Recovery Context"
TASK = "Task"  # the section that always comes first
MIN_TASK_CHARS = 60
KEY_SHOWN_CHARS = 40  # session keys can be 255 characters; the header must stay short
ITEM_CHARS = 400
PROMPT_CHARS = 300
QUOTE_CHARS = 300
MAX_QUOTED_LINES = 40  # never more candidate lines of a message or summary than this
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


def _shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` chars, cut at a word boundary with an ellipsis if needed."""
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut + "…"


def _clean(text: str, limit: int) -> str:
    """One line of at most ``limit`` chars, redacted before it is cut (a cut secret may no
    longer look like one)."""
    return _shorten(" ".join(redact(text[: limit * 4 + 256]).split()), limit)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


@dataclass(frozen=True)
class _Section:
    title: str
    lines: list[str]  # the lines that could ever be shown, redacted, in order
    quota: int  # lines it gets before any section gets more than its quota
    total: int  # items in all, of which ``lines`` is the head

    @property
    def name(self) -> str:
        return self.title.lower()


def _listed(
    title: str, items: Sequence[str], *, quota: int, chars: int, within: int, prefix: str = "- "
) -> _Section:
    """A section of one line per item, redacted; only the items that could fit ``within``
    are rendered (the others count in ``total``)."""
    lines: list[str] = []
    used = 0
    for item in items:
        line = prefix + _clean(item, chars)
        used += len(line) + 1
        if used > within:
            break
        lines.append(line)
    return _Section(title, lines, quota, len(items))


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


def _same(one: str, other: str) -> bool:
    """Whether two texts say the same, one possibly cut shorter (a prompt keeps 500 chars,
    the task 2000)."""
    one, other = " ".join(one.split()), " ".join(other.split())
    return bool(one and other) and (one.startswith(other) or other.startswith(one))


def _is_note(prompt: str, notes: Sequence[str]) -> bool:
    """Whether ``prompt`` only made a note (``# …``, ``/remember …``) shown among the notes."""
    prompt = prompt.strip()
    return any(prompt.endswith(note) and len(prompt) - len(note) <= 10 for note in notes)


def _sections(checkpoint: Checkpoint, compact_summary: str, within: int) -> list[_Section]:
    """The sections with content, in priority order (see the README's "The recovery context")."""
    notes = _unique(reversed(checkpoint.recent_remembers))  # newest first
    requests = [p for p in _unique(reversed(checkpoint.recent_prompts)) if not _is_note(p, notes)]
    raw_task = checkpoint.current_task or next(iter(requests), "")
    task = _clean(raw_task, 1000)
    # The task is the in-progress todo, or the agent's own statement of it; what the user
    # asked last comes right after it, unless it is the task itself.
    latest = next(iter(requests), "")
    if _same(latest, raw_task):
        latest = ""
    earlier = [p for p in requests[1:] if not _same(p, raw_task)]
    concerns = [f"Blocker: {item}" for item in _unique(checkpoint.blockers)]
    concerns += [f"Open: {item}" for item in _unique(checkpoint.open_questions)]
    sections = [
        _Section(TASK, [task] if task else [], 1, 1 if task else 0),
        _listed(
            "Latest request",
            [latest] if latest else [],
            quota=1,
            chars=PROMPT_CHARS,
            within=within,
            prefix="",
        ),
        _listed(
            "Next steps", _unique(checkpoint.next_steps), quota=5, chars=ITEM_CHARS, within=within
        ),
        _listed(
            "Decisions", _unique(checkpoint.decisions), quota=5, chars=ITEM_CHARS, within=within
        ),
        _listed("Open questions and blockers", concerns, quota=3, chars=ITEM_CHARS, within=within),
        _listed(
            "Modified files",
            _unique(reversed(checkpoint.modified_files)),
            quota=5,
            chars=ITEM_CHARS,
            within=within,
        ),
        _listed("Remembered notes", notes, quota=3, chars=PROMPT_CHARS, within=within),
        _listed("Recent prompts", earlier, quota=2, chars=PROMPT_CHARS, within=within),
        _quoted(
            "Last assistant message", checkpoint.last_assistant_message, quota=3, within=within
        ),
        _quoted("Compaction summary", compact_summary, quota=4, within=within),
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
    """The frames from the fullest to the tersest: a small budget goes to the task, not to
    saying where the context came from. Another session's checkpoint names that session in
    every frame but the tersest."""
    trigger = checkpoint.get_trigger_display().lower()
    where = {"session": "this session", "lineage": "the session this one continues"}.get(
        match, "an earlier session in this project"
    )
    key = redact(checkpoint.session_key)
    age = _age(now - checkpoint.created_at)
    count = checkpoint.prompt_count
    full = [
        HEADER,
        f"Recovered from {_article(trigger)} {trigger} checkpoint of {where} "
        f"(`{_shorten(key, KEY_SHOWN_CHARS)}`), taken {age} "
        f"after {count} prompt{'' if count == 1 else 's'}.",
    ]
    named_key = "" if match == "session" else f" (`{_shorten(key, 16)}`)"
    short = [HEADER, f"From {_article(trigger)} {trigger} checkpoint of {where}{named_key}, {age}."]
    if passed_over:
        full.append(
            f"Chosen over {passed_over} newer checkpoint{'' if passed_over == 1 else 's'} "
            "of this project with less work in them."
        )
    if current_branch and checkpoint.git_branch and current_branch != checkpoint.git_branch:
        full.append(
            f"Warning: that checkpoint was taken on branch `{checkpoint.git_branch}`; "
            f"you are on `{current_branch}`. Check before relying on it."
        )
        short.append(
            f"Warning: taken on branch `{_shorten(checkpoint.git_branch, 60)}`, "
            f"you are on `{_shorten(current_branch, 60)}`."
        )
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
        self.task_shortened = False
        self.task_room = 0  # characters the task could have had
        self.head_chars = len("\n".join(frame.head))

    def omitted(self) -> list[str]:
        names = ["task (shortened)"] if self.task_shortened else []
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
        self.kept[index] += 1
        self.sizes[index] += 1 + len(section.lines[kept])
        if self.length() <= limit:
            return True
        self.kept[index] -= 1
        self.sizes[index] -= 1 + len(section.lines[kept])
        return False

    def place_task(self, limit: int, cap: int) -> None:
        """The task first, shortened to at most ``cap`` and to what is left with everything
        else omitted."""
        if not self.sections or self.sections[0].title != TASK:
            return
        task = self.sections[0]
        line = task.lines[0]
        self.sections[0] = _Section(task.title, [""], task.quota, task.total)
        self.kept[0], self.sizes[0] = 1, 1
        self.task_room = min(limit - self.length(), cap)
        if len(line) > self.task_room:
            self.task_shortened = True  # which lengthens the omitted line
            self.task_room = min(limit - self.length(), cap)
            line = _shorten(line, max(1, self.task_room))
        self.sections[0] = _Section(task.title, [line], task.quota, task.total)
        self.sizes[0] = 1 + len(line)

    def fill(self, limit: int) -> None:
        """Every section its quota in priority order, then the rest in the same order. A
        section keeps a run of its first lines, and none appears while one above it is
        missing: a short line of a lesser section never stands in for a whole section."""
        for by_quota in (True, False):
            for index, section in enumerate(self.sections):
                upto = min(section.quota, len(section.lines)) if by_quota else len(section.lines)
                while self.kept[index] < upto and self.add(index, limit):
                    pass
                if not self.kept[index]:
                    break

    def overhead(self) -> int:
        return self.head_chars + self.footer_chars()

    def text(self) -> str:
        lines = list(self.frame.head)
        for section, kept in zip(self.sections, self.kept, strict=True):
            if kept:
                lines += ["", f"### {section.title}", *section.lines[:kept]]
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
    and below the harness cap. The task comes first whatever the budget, shortened if need
    be (to at most half the budget). Every section then gets its first few lines in
    priority order, and the budget left goes to the rest in the same order; sections are cut
    at line boundaries, none appears while one above it is missing, and the last line says
    what did not fit (and, with room, where to get it). The frame (where the checkpoint came
    from, the omitted line) gets terser as the budget shrinks: it may take at most a third
    of it, unless everything fits anyway.
    """
    limit = min(
        budget if budget is not None else config.recovery_budget_chars,
        config.recovery_budget_chars,
        config.inject_budget_chars,
        HARNESS_CONTEXT_CAP_CHARS - 1,
    )
    sections = _sections(checkpoint, compact_summary, limit)
    task_cap = max(MIN_TASK_CHARS, limit // 2)
    wanted_task = (
        min(len(sections[0].lines[0]), task_cap) if sections and sections[0].title == TASK else 0
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
        fit.place_task(limit, task_cap)
        fit.fill(limit)
        if not fit.omitted():
            break
        if fit.overhead() * 3 <= limit and fit.task_room >= wanted_task:
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
