"""Reading back a session export (``services.exports``) into an owner's sessions.

Ids: a checkpoint keeps its UUID, unless that UUID already belongs to another owner's
checkpoint (the export is imported into a second account on the same server); then it gets
an id derived from the original and the owner: the same time prefix (ids stay time-sorted)
and a hash for the rest, so a re-import derives the same id and recognises it. Parent links
and injections follow the mapping. Session and injection row numbers are not exported.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.contrib.auth.models import User
from django.db import models, transaction
from django.utils.dateparse import parse_datetime

from checkpoints.harnesses.base import identifier_problem
from checkpoints.models import Checkpoint, Injection, Session
from checkpoints.services.exports import (
    CHECKPOINT_SKIPPED,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    INJECTION_SKIPPED,
    SESSION_SKIPPED,
    row_fields,
)
from checkpoints.services.imports import ImportReport
from checkpoints.services.locks import write_serialized
from checkpoints.services.redaction import redact_data


class ExportFormatError(ValueError):
    """The document is not a session export this version can read."""


def _values(model: type[models.Model], skipped: frozenset[str], data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ExportFormatError(f"A {model.__name__.lower()} must be a JSON object.")
    values: dict[str, Any] = {}
    for field in row_fields(model, skipped):
        if field.name not in data:
            continue
        value = data[field.name]
        if isinstance(field, models.DateTimeField) and value is not None:
            parsed = parse_datetime(value) if isinstance(value, str) else None
            if parsed is None:
                raise ExportFormatError(f"'{field.name}' must be an ISO 8601 time.")
            value = parsed
        values[field.attname] = value
    return values


def _uuid(value: Any, name: str) -> uuid.UUID | None:
    if value in (None, ""):
        return None
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ExportFormatError(f"'{name}' must be a UUID.") from None


def checkpoint_id_for(*, original: uuid.UUID, owner: User) -> uuid.UUID:
    """The id ``original`` takes in ``owner``'s account: itself if free or already theirs,
    else one derived from it and the owner (same 48-bit time prefix, hashed rest)."""
    holder = Checkpoint.objects.filter(id=original).values_list("owner_id", flat=True).first()
    if holder is None or holder == owner.pk:
        return original
    digest = hashlib.sha256(f"{owner.pk}:{original}".encode()).digest()
    raw = bytearray(original.bytes[:6] + digest[:10])
    raw[6] = 0x70 | (raw[6] & 0x0F)  # version 7
    raw[8] = 0x80 | (raw[8] & 0x3F)  # RFC 4122 variant
    return uuid.UUID(bytes=bytes(raw))


def signet_import(*, owner: User, document: Any) -> ImportReport:
    """Import one session export into ``owner``'s account, in one transaction.

    A session the owner already has keeps its row; only checkpoints and injections it lacks
    are added, so a re-import adds nothing. Every text is redacted again (a no-op on an
    export, which was redacted on the way out). Raises ``ExportFormatError`` for a document that
    is not an export of this format and version.
    """
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise ExportFormatError(f"Not a session export (expected format {EXPORT_FORMAT!r}).")
    if document.get("version") != EXPORT_VERSION:
        raise ExportFormatError(f"Unsupported export version {document.get('version')!r}.")
    document = redact_data(document)
    session_data = document.get("session")
    values = _values(Session, SESSION_SKIPPED, session_data)
    key = values.get("session_key")
    if not isinstance(key, str) or identifier_problem(key):
        raise ExportFormatError("The session has no valid 'session_key'.")
    checkpoints = document.get("checkpoints") or []
    injections = document.get("injections") or []
    if not isinstance(checkpoints, list) or not isinstance(injections, list):
        raise ExportFormatError("'checkpoints' and 'injections' must be lists.")
    report = ImportReport(files=1)
    with write_serialized(), transaction.atomic():
        session = Session.objects.select_for_update().filter(owner=owner, session_key=key).first()
        created = session is None
        if session is None:
            previous_key = session_data.get("previous_session_key") or ""
            previous = (
                Session.objects.filter(owner=owner, session_key=previous_key).first()
                if isinstance(previous_key, str) and previous_key
                else None
            )
            session = Session.objects.create(owner=owner, previous_session=previous, **values)
        ids: dict[uuid.UUID, uuid.UUID] = {}
        for data in checkpoints:
            original = _uuid(data.get("id") if isinstance(data, dict) else None, "id")
            if original is None:
                raise ExportFormatError("Every checkpoint needs its 'id'.")
            ids[original] = checkpoint_id_for(original=original, owner=owner)
        existing = set(Checkpoint.objects.filter(id__in=ids.values()).values_list("id", flat=True))
        for data in checkpoints:
            row = _values(Checkpoint, CHECKPOINT_SKIPPED, data)
            new_id = ids[_uuid(data["id"], "id") or uuid.UUID(int=0)]
            if new_id in existing:
                continue
            parent = _uuid(data.get("parent_id"), "parent_id")
            row.update(
                id=new_id,
                owner_id=owner.pk,
                session_id=session.pk,
                session_key=session.session_key,
                parent_id=ids.get(parent) if parent is not None else None,
            )
            Checkpoint.objects.create(**row)
            existing.add(new_id)
            report.checkpoints_created += 1
        seen: set[tuple[Any, ...]] = set(
            Injection.objects.filter(session=session).values_list("created_at", "source", "content")
        )
        for data in injections:
            row = _values(Injection, INJECTION_SKIPPED, data)
            identity = (row.get("created_at"), row.get("source"), row.get("content"))
            if identity in seen:
                continue
            checkpoint = _uuid(data.get("checkpoint_id"), "checkpoint_id")
            mapped = ids.get(checkpoint) if checkpoint is not None else None
            Injection.objects.create(
                session=session,
                checkpoint_id=mapped if mapped in existing else None,
                **row,
            )
            seen.add(identity)
            report.injections_created += 1
    if created:
        report.sessions_created = 1
    elif report.checkpoints_created or report.injections_created:
        report.sessions_updated = 1
    else:
        report.sessions_unchanged = 1
    return report
