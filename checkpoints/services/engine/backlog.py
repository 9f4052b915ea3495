"""Events a harness posted itself, and the same events a client found later in the
transcript: each applied once, and in the order they happened.

Some events reach the server only once or never: a harness posts them itself (Claude Code's
``http`` hooks, in installs not yet upgraded to commands), or a client's outbox drops its
oldest, or a hook is killed before it queues. The next event a client sends carries what it
found in the transcript since its last one (``Event.backlog``), including what did arrive.
Each names what happened by the harness's own id (``Event.delivery_key``), the same either
way.

What counts twice if applied twice (a prompt, which is counted; a compaction's summary, which
a newer one must not be replaced by) is remembered on the session as the digest of its key
and the time it happened, the last ``DELIVERED_KEEP`` of them (``Session.delivered_keys``):
a backlog event found there is skipped, and so is a queued event that a later one's backlog
applied first (an outbox lets newer events past one that stalled too often). A client sends
what happened since its last event (each hook runs at least once a turn), so an event it
finds again was applied at most a few turns before; only a run of more than
``DELIVERED_KEEP`` prompts that all arrived while every event that carries a backlog failed
could count one twice. An edit needs no memory: its file is added only if the session does
not list it yet; nor does a decision (the user's answer to the agent's question), added to
the session's decisions only if they do not hold it yet.

Order: a prompt the server missed goes into the recent prompts before those that happened
after it (the times remembered with the digests say which), not after the ones that arrived
while it was missing.

What the lines say of the session now (``Event.latest``: the newest branch, the agent's
newest text) is taken from a live event only: one replayed from an outbox is as old as the
lines it read, and a later event's lines said it newer. The agent's text is not taken when
it was written before the session's latest compaction, whose cycle ended the session's last
message (``handlers._compaction_mark``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime

from checkpoints.harnesses.base import Event, EventKind, TranscriptLatest
from checkpoints.models import ContinuityConfig, Session
from checkpoints.services.engine.handlers import prompt_intent_record, summary_record
from checkpoints.services.events import (
    MAX_DECISIONS,
    MAX_FILES,
    MAX_QUERIES,
    MAX_REMEMBERS,
    PROMPT_KEEP_CHARS,
    query_terms,
)
from checkpoints.services.pending import pending_mark_if_due
from checkpoints.services.store import MAX_PROMPTS

DELIVERED_KEEP = 48
# What a digest's first character says it is: only these kinds are remembered.
_REMEMBERED = {EventKind.PROMPT: "p", EventKind.POST_COMPACT: "c"}


def delivery_digest(*, event: Event) -> str:
    """The digest ``Session.delivered_keys`` keeps of ``event``'s key ('' when it keeps
    none): short, so that the row a prompt writes back stays small."""
    letter = _REMEMBERED.get(event.kind)
    if letter is None or not event.delivery_key:
        return ""
    digest = hashlib.blake2b(event.delivery_key.encode(), digest_size=8).hexdigest()
    return f"{letter}{digest}"


def delivery_seen(*, session: Session, digest: str) -> bool:
    """Whether the event of ``digest`` was applied to ``session`` already."""
    return any(entry[0] == digest for entry in _entries(session))


def delivery_record(*, session: Session, digest: str, happened_at: datetime) -> None:
    """Remember that the event of ``digest``, which happened at ``happened_at``, was applied."""
    entries = [*_entries(session), [digest, int(happened_at.timestamp())]]
    session.delivered_keys = entries[-DELIVERED_KEEP:]


def _entries(session: Session) -> list[list[object]]:
    # The column is only ever written here; anything else in it is ignored, not trusted.
    return [
        entry
        for entry in session.delivered_keys
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], int)
    ]


def _newer(session: Session, letter: str, happened_at: datetime) -> int:
    """How many remembered events of kind ``letter`` happened after ``happened_at``."""
    moment = int(happened_at.timestamp())
    return sum(
        1
        for digest, when in _entries(session)
        if isinstance(digest, str) and digest.startswith(letter) and isinstance(when, int)
        and when > moment
    )  # fmt: skip


def backlog_apply(
    *, session: Session, events: Iterable[Event], config: ContinuityConfig, now: datetime
) -> bool:
    """Apply what ``session`` lacks of ``events`` (in the order they happened), as of when
    each happened; True when that marked a periodic checkpoint pending.

    They count and record their facts but inject nothing: the agent has moved on.
    """
    changed = False
    for event in events:
        happened_at = min(event.happened_at or now, now)
        if event.kind is EventKind.TOOL_USE:
            files = [path for path in event.files if path not in session.modified_files]
            if files:
                session.modified_files = [*session.modified_files, *files][-MAX_FILES:]
                changed = True
            decided = [item for item in event.decisions if item not in session.decisions]
            if decided:  # the user's answers to the agent's questions, newest last
                session.decisions = [*session.decisions, *decided][-MAX_DECISIONS:]
                changed = True
            continue
        digest = delivery_digest(event=event)
        if not digest or delivery_seen(session=session, digest=digest):
            continue
        if event.kind is EventKind.PROMPT:
            _prompt_insert(session, event, happened_at)
            changed = True
        elif (
            event.kind is EventKind.POST_COMPACT
            and event.compact_summary
            and not _newer(session, "c", happened_at)  # nor an older summary a newer one
        ):
            summary_record(session=session, summary=event.compact_summary, fresh=True)
        delivery_record(session=session, digest=digest, happened_at=happened_at)
    if not changed:
        return False
    session.changed_since_checkpoint = True
    return pending_mark_if_due(session=session, config=config, now=now)


def _prompt_insert(session: Session, event: Event, happened_at: datetime) -> None:
    session.prompt_count += 1
    text = event.prompt[:PROMPT_KEEP_CHARS]
    if not text:
        return
    prompts = list(session.recent_prompts)
    # Before the prompts that happened after it, which are the last ones kept.
    at = max(0, len(prompts) - _newer(session, "p", happened_at))
    prompts.insert(at, text)
    session.recent_prompts = prompts[-MAX_PROMPTS:]
    if event.remember:
        session.recent_remembers = [*session.recent_remembers, event.remember][-MAX_REMEMBERS:]
    else:
        prompt_intent_record(session=session, prompt=event.prompt)
    terms = query_terms(event.prompt)
    if terms and terms not in session.recent_queries:
        session.recent_queries = [*session.recent_queries, terms][-MAX_QUERIES:]


def latest_record(*, session: Session, latest: TranscriptLatest, now: datetime) -> None:
    """Make what a live event's transcript lines say of the session now its own: the branch
    they carry (the head known is the previous branch's, so it is dropped with it), and the
    agent's newest text unless it was written before the latest compaction began."""
    branch = latest.git_branch
    if branch and branch != session.git_branch:
        session.git_branch = branch
        session.git_head = ""
    message = latest.last_assistant_message
    if not message or message == session.last_assistant_message:
        return
    said_at = min(latest.message_at or now, now)
    started = session.compaction_started_at
    if started is not None and said_at < started:
        return
    session.last_assistant_message = message
    session.changed_since_checkpoint = True
