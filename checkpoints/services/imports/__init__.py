"""Importing sessions from elsewhere: a Signet export, Claude Code transcripts, OpenClaw
session stores. Admin commands only (``manage.py import_sessions``): the admin names the
files on the command line; no request ever makes the server open a path.

Re-importing the same input adds nothing. Transcript imports mark each checkpoint they
write with a deterministic tag (``import:<harness>:compact:<n>`` for the n-th compaction,
``import:<harness>:end:<lines>`` for the tail of a transcript of that many lines) and skip
a mark the session already holds: an unchanged transcript adds nothing, a transcript that
grew adds its new compactions and a new end checkpoint. A session the hooks already track
(it exists, but holds no imported checkpoint) is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from checkpoints.models import Checkpoint, Session

IMPORTED_TAG = "imported"


@dataclass
class ImportReport:
    """What an import did, summed over its files."""

    files: int = 0
    sessions_created: int = 0
    sessions_updated: int = 0
    sessions_unchanged: int = 0
    sessions_skipped: int = 0
    checkpoints_created: int = 0
    injections_created: int = 0
    malformed_lines: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: ImportReport) -> None:
        """Add ``other``'s counts and problems to this report."""
        for name in (
            "files",
            "sessions_created",
            "sessions_updated",
            "sessions_unchanged",
            "sessions_skipped",
            "checkpoints_created",
            "injections_created",
            "malformed_lines",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems.extend(other.problems)

    def summary(self) -> str:
        """One line for the terminal."""
        return (
            f"{self.files} file(s): {self.sessions_created} session(s) created, "
            f"{self.sessions_updated} updated, {self.sessions_unchanged} unchanged, "
            f"{self.sessions_skipped} skipped; {self.checkpoints_created} checkpoint(s) and "
            f"{self.injections_created} injection(s) added; "
            f"{self.malformed_lines} malformed line(s) skipped"
        )


def import_marks(*, session: Session) -> set[str]:
    """The import marks (tags) the session's checkpoints already carry.

    Read in Python: a session holds at most ``max_checkpoints_per_session`` checkpoints, and
    SQLite has no JSON containment look-up.
    """
    marks: set[str] = set()
    for tags in Checkpoint.objects.filter(session=session).values_list("tags", flat=True):
        if isinstance(tags, list):
            marks.update(tag for tag in tags if isinstance(tag, str) and tag.startswith("import:"))
    return marks


def timestamp_parse(value: object) -> datetime | None:
    """An ISO 8601 string or Unix milliseconds as an aware datetime; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
