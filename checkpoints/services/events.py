"""What an event carries, made ready to keep: every client text redacted and cut to what is
kept, the transcript facts a client sent as checkpoint content, a prompt's query terms.

Pure functions of the event (no query): the engine runs them before it takes the session's
lock, so writers never queue behind redaction.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from checkpoints.harnesses.base import AgentTasks, Event, TranscriptExtract, TranscriptLatest
from checkpoints.services.redaction import redact_clip
from checkpoints.services.store import MAX_PROMPTS, CheckpointContent

# What a session keeps of its stream, and how much of each text.
MAX_QUERIES = 20
MAX_REMEMBERS = 10
MAX_FILES = 50
MAX_DECISIONS = 20  # what a transcript read adds to a checkpoint's decisions
DECISION_KEEP_CHARS = 300
PROMPT_KEEP_CHARS = 500
MESSAGE_KEEP_CHARS = 2000
GOAL_KEEP_CHARS = 1000  # a prompt as it comes (``event_prepare``): the opening request whole
REMEMBER_KEEP_CHARS = 1000
SUMMARY_KEEP_CHARS = 20_000
PATH_KEEP_CHARS = 1024
TRANSCRIPT_PATH_KEEP_CHARS = 4096
MODEL_KEEP_CHARS = 128
BRANCH_KEEP_CHARS = 255
SOURCE_KEEP_CHARS = 64  # a start source, an end reason, a compaction trigger
MAX_TOKENS = 2**31 - 1  # the column's range on PostgreSQL
QUERY_TERMS = 8

_HEX = frozenset("0123456789abcdef")
_WORD = re.compile(r"[\w./:-]{3,64}")
_STOPWORD_TEXT = (
    "the and for with that this from into have has was were are you your can could would "
    "should please make sure also then than them they there here what when where which "
    "while will just like some more most other only over such very about after before "
    "again all any but each how its not now our out own same too use using want need let "
    "lets"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _redacted_field(value: str, limit: int) -> str:
    """``redact_clip`` for the fields a session repeats on every event (cwd, model, branch,
    transcript path): the same few values, so each is scanned once per worker. A value
    longer than it may be kept is not cached: the cache would hold all of it."""
    if len(value) > limit:
        return redact_clip(value, limit)
    return _redacted_short(value, limit)


@functools.lru_cache(maxsize=4096)
def _redacted_short(value: str, limit: int) -> str:
    return redact_clip(value, limit)


def event_prepare(event: Event) -> Event:
    """The event with every text it carries redacted and cut to what is kept.

    Paths are redacted before they are normalised: ``postgres://u:pw@h/db`` in a folder name
    must still look like a URL when the rules see it.
    """
    return dataclasses.replace(
        event,
        cwd=_redacted_field(event.cwd, PATH_KEEP_CHARS),
        client_project=_redacted_field(event.client_project, PATH_KEEP_CHARS),
        client_git_root=_redacted_field(event.client_git_root, PATH_KEEP_CHARS),
        transcript_path=_redacted_field(event.transcript_path, TRANSCRIPT_PATH_KEEP_CHARS),
        model=_redacted_field(event.model, MODEL_KEEP_CHARS),
        git_branch=_redacted_field(event.git_branch, BRANCH_KEEP_CHARS),
        git_head=event.git_head if _is_commit(event.git_head) else "",
        source=_redacted_field(event.source, SOURCE_KEEP_CHARS),
        prompt=redact_clip(event.prompt.strip(), REMEMBER_KEEP_CHARS),
        remember=redact_clip(event.remember.strip(), REMEMBER_KEEP_CHARS),
        compact_summary=redact_clip(event.compact_summary, SUMMARY_KEEP_CHARS),
        last_assistant_message=redact_clip(event.last_assistant_message, MESSAGE_KEEP_CHARS),
        files=tuple(redact_clip(path, PATH_KEEP_CHARS) for path in event.files),
        decisions=tuple(redact_clip(item, DECISION_KEEP_CHARS) for item in event.decisions),
        backlog=tuple(event_prepare(item) for item in event.backlog),
        latest=None
        if event.latest is None
        else TranscriptLatest(
            git_branch=_redacted_field(event.latest.git_branch, BRANCH_KEEP_CHARS),
            last_assistant_message=redact_clip(
                event.latest.last_assistant_message, MESSAGE_KEEP_CHARS
            ),
            message_at=event.latest.message_at,
        ),
        tasks=None
        if event.tasks is None
        else AgentTasks(
            current_task=redact_clip(event.tasks.current_task, MESSAGE_KEEP_CHARS),
            todos=tuple(
                (redact_clip(content, PROMPT_KEEP_CHARS), status)
                for content, status in event.tasks.todos
            ),
        ),
        usage=None
        if event.usage is None
        else dataclasses.replace(
            event.usage, model=_redacted_field(event.usage.model, MODEL_KEEP_CHARS)
        ),
    )


def _is_commit(value: str) -> bool:
    return len(value) in (40, 64) and _HEX.issuperset(value)


def facts_content(facts: TranscriptExtract | None) -> CheckpointContent | None:
    """What the client read from the transcript, as checkpoint content: redacted, bounded."""
    if facts is None:
        return None
    tokens = facts.context_tokens
    return CheckpointContent(
        goal=redact_clip(facts.goal, MESSAGE_KEEP_CHARS),
        current_task=redact_clip(facts.current_task, MESSAGE_KEEP_CHARS),
        next_steps=[
            redact_clip(content, PROMPT_KEEP_CHARS)
            for content, status in facts.todos
            if status == "pending"
        ],
        modified_files=[
            redact_clip(path, PATH_KEEP_CHARS) for path in facts.modified_files[-MAX_FILES:]
        ],
        recent_prompts=[
            redact_clip(prompt, PROMPT_KEEP_CHARS) for prompt in facts.recent_prompts[-MAX_PROMPTS:]
        ],
        decisions=[
            redact_clip(decision, DECISION_KEEP_CHARS)
            for decision in facts.decisions[-MAX_DECISIONS:]
        ],
        last_assistant_message=redact_clip(facts.last_assistant_message, MESSAGE_KEEP_CHARS),
        git_branch=redact_clip(facts.git_branch, BRANCH_KEEP_CHARS),
        context_tokens=None if tokens is None else max(0, min(tokens, MAX_TOKENS)),
        compact_summary=redact_clip(facts.compact_summary, SUMMARY_KEEP_CHARS),
    )


def query_terms(prompt: str) -> str:
    """The distinctive words of a prompt, as one would type them into a memory search."""
    terms: dict[str, None] = {}
    for word in _WORD.findall(prompt):
        lowered = word.lower().strip(".:-")
        if len(lowered) >= 3 and lowered not in _STOPWORDS and not lowered.isdigit():
            terms.setdefault(lowered, None)
        if len(terms) >= QUERY_TERMS:
            break
    return " ".join(terms)
