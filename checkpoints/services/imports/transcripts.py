"""Writing an imported transcript's checkpoints: the part the Claude Code and OpenClaw
imports share. Each import reads its own format into ``ImportedPoint``s; this writes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from checkpoints.models import ContinuityConfig, Session
from checkpoints.services.config import config_get
from checkpoints.services.imports import IMPORTED_TAG, ImportReport, import_marks
from checkpoints.services.locks import write_serialized
from checkpoints.services.redaction import redact, redact_clip, redact_data
from checkpoints.services.sessions import SessionSeed, session_lock
from checkpoints.services.store import MAX_ITEM_CHARS, CheckpointContent, checkpoint_write

END_REASON_IMPORTED = "imported"
SUMMARY_KEEP_CHARS = 20_000


@dataclass
class ImportedPoint:
    """One checkpoint to write: the session's state at a compaction or at the end."""

    mark: str
    trigger: str
    at: datetime
    content: CheckpointContent
    prompt_count: int = 0
    compactions: int = 0
    model: str = ""
    summary: str = ""  # the harness's compaction summary, appended to the digest


@dataclass
class ImportedSession:
    """A transcript read for import: the session's identity and its checkpoints, in order."""

    harness: str
    session_key: str
    cwd: str
    started_at: datetime
    last_activity_at: datetime
    points: list[ImportedPoint] = field(default_factory=list)
    transcript_path: str = ""
    model: str = ""
    extra_tags: list[str] = field(default_factory=list)


def imported_session_write(*, owner: User, imported: ImportedSession) -> ImportReport:
    """Write ``imported`` into ``owner``'s account in one transaction; what it did.

    A session that exists without any imported checkpoint belongs to the hooks and is left
    alone (skipped). Points whose mark the session already holds are skipped; so are points
    beyond ``max_checkpoints_per_session`` (the oldest), which the cap would delete at once.
    """
    report = ImportReport(files=1)
    config = config_get()
    points = imported.points[-config.max_checkpoints_per_session :]
    with write_serialized(), transaction.atomic():
        exists = Session.objects.filter(owner=owner, session_key=imported.session_key).exists()
        session = session_lock(
            owner=owner,
            session_key=imported.session_key,
            seed=SessionSeed(
                harness=imported.harness,
                cwd=redact_clip(imported.cwd, 1024),
                model=imported.model,
                transcript_path=redact_clip(imported.transcript_path, 4096),
            ),
            now=imported.started_at,
        )
        marks = import_marks(session=session) if exists else set()
        if exists and not marks:
            report.sessions_skipped = 1
            report.problems.append(
                f"{imported.session_key}: already tracked by the hooks; not imported"
            )
            return report
        written = 0
        for point in points:
            if point.mark in marks:
                continue
            _point_write(session=session, point=point, imported=imported, config=config)
            written += 1
        if written:
            session.last_activity_at = max(session.last_activity_at, imported.last_activity_at)
            session.ended_at = max(session.last_activity_at, session.started_at)
            session.end_reason = END_REASON_IMPORTED
            session.save()
    report.checkpoints_created = written
    if not exists:
        report.sessions_created = 1
    elif written:
        report.sessions_updated = 1
    else:
        report.sessions_unchanged = 1
    return report


def _point_write(
    *,
    session: Session,
    point: ImportedPoint,
    imported: ImportedSession,
    config: ContinuityConfig,
) -> None:
    content = point.content
    # The row's rolling state as it stood at this point: the digest and the checkpoint
    # fields that come from the row read it.
    session.prompt_count = max(session.prompt_count, point.prompt_count)
    session.recent_prompts = redact_data(list(content.recent_prompts))
    session.modified_files = redact_data(list(content.modified_files))
    session.last_assistant_message = redact_clip(content.last_assistant_message, MAX_ITEM_CHARS)
    session.git_branch = content.git_branch[:255] or session.git_branch
    session.model = (point.model or session.model)[:128]
    session.context_tokens = content.context_tokens
    session.compaction_count = max(session.compaction_count, point.compactions)
    if point.summary:
        session.compact_summary = redact_clip(point.summary, SUMMARY_KEEP_CHARS)
    content.tags = [IMPORTED_TAG, point.mark, *imported.extra_tags]
    checkpoint = checkpoint_write(
        session=session, trigger=point.trigger, config=config, now=point.at, content=content
    )
    if point.summary:
        checkpoint.digest = redact(
            f"{checkpoint.digest}\n\n### Compaction summary\n"
            f"{redact_clip(point.summary, SUMMARY_KEEP_CHARS)}"
        )
        checkpoint.save(update_fields=["digest"])
