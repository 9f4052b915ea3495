"""Exporting a session: one JSON document with the session, its checkpoints and injections.

The document holds every column needed to rebuild the rows (``imports.signet`` reads it
back), except the local row numbers of sessions and injections, which mean nothing on
another server: a session is named by its key (and its predecessor by
``previous_session_key``), an injection by its session, time and content, a checkpoint by
its UUID. Every text is redacted on the way out, like every answer of the API.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from checkpoints.models import Checkpoint, Injection, Session
from checkpoints.services.redaction import redact_data

EXPORT_FORMAT = "signet-continuity.session"
EXPORT_VERSION = 1

# Columns not exported: local row numbers and the owner (the import names its own).
# row_version is this database's bookkeeping of writes, not the session's state.
SESSION_SKIPPED = frozenset({"id", "owner", "previous_session", "row_version"})
CHECKPOINT_SKIPPED = frozenset({"owner", "session", "parent"})
INJECTION_SKIPPED = frozenset({"id", "session", "checkpoint"})


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def row_fields(model: type[models.Model], skipped: frozenset[str]) -> list[models.Field[Any, Any]]:
    """The concrete columns of ``model`` the export carries, in model order."""
    return [
        field
        for field in model._meta.concrete_fields
        if field.name not in skipped and isinstance(field, models.Field)
    ]


def _row(instance: models.Model, skipped: frozenset[str]) -> dict[str, Any]:
    return {
        field.name: _json_value(getattr(instance, field.attname))
        for field in row_fields(type(instance), skipped)
    }


class SessionNotFoundError(LookupError):
    """No session answers to the key (and user) given, or several do."""


def session_find(*, session_key: str, username: str = "") -> Session:
    """The session ``session_key`` of ``username``, or of whichever user has one when no
    user is named; ``SessionNotFoundError`` when none has, or when several have."""
    rows = Session.objects.filter(session_key=session_key).select_related("owner")
    if username:
        rows = rows.filter(owner__username=username)
    found = list(rows[:2])
    if not found:
        owner = f" of user {username!r}" if username else ""
        raise SessionNotFoundError(f"No session {session_key!r}{owner}.")
    if len(found) > 1:
        raise SessionNotFoundError(
            f"Several users have a session {session_key!r}: name one with --user."
        )
    return found[0]


def session_export(*, session: Session, now: datetime | None = None) -> dict[str, Any]:
    """The export document of ``session``: its row, its checkpoints and its injections, oldest
    first, with a format name and version. Redacted; JSON values only."""
    previous = session.previous_session
    session_data = _row(session, SESSION_SKIPPED)
    session_data["previous_session_key"] = previous.session_key if previous is not None else ""
    checkpoints = []
    for checkpoint in Checkpoint.objects.filter(session=session).order_by("created_at", "id"):
        data = _row(checkpoint, CHECKPOINT_SKIPPED)
        data["parent_id"] = _json_value(checkpoint.parent_id)
        checkpoints.append(data)
    injections = []
    for injection in Injection.objects.filter(session=session).order_by("created_at", "id"):
        data = _row(injection, INJECTION_SKIPPED)
        data["checkpoint_id"] = _json_value(injection.checkpoint_id)
        injections.append(data)
    document = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exported_at": (now or timezone.now()).isoformat(),
        "session": session_data,
        "checkpoints": checkpoints,
        "injections": injections,
    }
    result: dict[str, Any] = redact_data(document)
    return result
