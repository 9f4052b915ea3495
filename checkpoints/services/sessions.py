"""Session rows: found or created, and locked for the writer's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from checkpoints.models import Session
from checkpoints.services.projects import project_identify


@dataclass(frozen=True)
class SessionSeed:
    """What a session is created with when its first event (or capture) arrives."""

    harness: str
    cwd: str = ""
    client_project: str = ""
    client_git_root: str = ""
    previous_session_key: str = ""
    model: str = ""
    git_branch: str = ""
    git_head: str = ""
    transcript_path: str = ""
    # A first prompt with no SessionStart before it: that hook did not get through (or is not
    # installed), so the prompt carries the recovery context.
    recovery_due: bool = False


def session_lock(
    *,
    owner: User,
    session_key: str,
    seed: SessionSeed,
    now: datetime,
    fields: Sequence[str] = (),
) -> Session:
    """The owner's session ``session_key``, locked for this transaction; created on first sight.

    ``fields`` narrows what is loaded of an existing row (the hot path reads few columns).
    Must run inside a transaction: the lock lasts until it commits.
    """
    locked = Session.objects.select_for_update()
    if fields:
        locked = locked.only(*fields)
    try:
        session = locked.get(owner=owner, session_key=session_key)
    except Session.DoesNotExist:
        pass
    else:
        session.owner = owner  # already loaded: spares a query wherever it is used
        return session
    identity = project_identify(
        owner=owner,
        cwd=seed.cwd,
        client_project=seed.client_project,
        client_git_root=seed.client_git_root,
    )
    previous = None
    if seed.previous_session_key:
        previous = Session.objects.filter(
            owner=owner, session_key=seed.previous_session_key
        ).first()
    try:
        with transaction.atomic():
            return Session.objects.create(
                owner=owner,
                session_key=session_key,
                harness=seed.harness,
                project=identity.project,
                project_normalized=identity.project_normalized,
                git_root=identity.git_root,
                previous_session=previous,
                started_at=now,
                last_activity_at=now,
                model=seed.model[:128],
                git_branch=seed.git_branch[:255],
                git_head=seed.git_head[:64],
                transcript_path=seed.transcript_path[:4096],
                recovery_due=seed.recovery_due,
            )
    except IntegrityError:  # another worker created it first
        return Session.objects.select_for_update().get(owner=owner, session_key=session_key)
