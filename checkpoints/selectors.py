"""Reads: the queries views, the API and the admin share."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Count, QuerySet

from checkpoints.models import Session


def session_list(*, owner: User, limit: int = 50) -> QuerySet[Session]:
    """The owner's sessions, most recently active first, with their checkpoint counts."""
    return (
        Session.objects.filter(owner=owner)
        .annotate(checkpoint_total=Count("checkpoints"))
        .order_by("-last_activity_at")[:limit]
    )
