"""The data model: constraints and indexes in the database, identifiers, token storage."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from checkpoints.ids import uuid7
from checkpoints.models import ApiToken, Checkpoint, ContinuityConfig, Session
from checkpoints.services import recovery
from checkpoints.services.pending import pending_due_sessions
from checkpoints.services.tokens import token_create, token_revoke
from tests.factories import CheckpointFactory, SessionFactory

pytestmark = pytest.mark.django_db


def _constraints(model: type[Model]) -> dict[str, Any]:
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, model._meta.db_table)


def test_checkpoint_lookup_indexes_exist_in_the_database():
    constraints = _constraints(Checkpoint)
    by_columns = {
        tuple(info["columns"]): name for name, info in constraints.items() if info["index"]
    }
    session = ("owner_id", "session_key", "created_at", "id")
    project = ("owner_id", "project_normalized", "created_at", "id")
    assert by_columns[session] == "checkpoint_session_recent"
    assert by_columns[project] == "checkpoint_project_recent"
    # Both are declared newest-first; the database must keep that order.
    for name in ("checkpoint_session_recent", "checkpoint_project_recent"):
        assert constraints[name]["orders"] == ["ASC", "ASC", "DESC", "DESC"]


def _plan(queryset: Any) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A test's tables are tiny, and their statistics vary with what ran before: make
            # a scan and a sort the planner's last resort, so it takes an index that gives
            # the order asked for when there is one (the question these tests ask).
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def test_recoverys_look_ups_walk_an_index_newest_first_without_sorting(owner, teammate):
    for user in (owner, teammate):
        for number in range(3):
            CheckpointFactory(
                owner=user,
                session=SessionFactory(owner=user, project_normalized=f"/src/p{number}"),
            )
    newest = ("-created_at", "-id")
    own = Checkpoint.objects.filter(owner=owner, session_key="k").order_by(*newest)[:1]
    project = (
        Checkpoint.objects.filter(
            owner=owner,
            project_normalized="/src/p1",
            created_at__gte=timezone.now() - timedelta(days=7),
        )
        .exclude(session_key="k")
        .order_by(*newest)[:1]
    )
    for queryset, index in (
        (own, "checkpoint_session_recent"),
        (project, "checkpoint_project_recent"),
    ):
        plan = _plan(queryset)
        assert index in plan
        assert "TEMP B-TREE" not in plan  # SQLite's sort
        assert "Sort" not in plan  # PostgreSQL's


def test_the_sweeps_look_up_of_pending_checkpoints_walks_its_index(owner):
    now = timezone.now()
    for number in range(3):
        SessionFactory(owner=owner, checkpoint_pending_since=now - timedelta(seconds=number))
        SessionFactory(owner=owner)  # nothing pending: not in the index
    due = pending_due_sessions(cutoff=now).values_list("pk", flat=True)[:500]
    plan = _plan(due)
    assert "session_pending_since" in plan
    assert "TEMP B-TREE" not in plan  # SQLite's sort
    assert "Sort" not in plan  # PostgreSQL's
    assert len(list(due)) == 3


def test_session_key_is_unique_per_owner_only(owner, teammate):
    SessionFactory(owner=owner, session_key="abc")
    SessionFactory(owner=teammate, session_key="abc")  # another owner may reuse the key
    with pytest.raises(IntegrityError), transaction.atomic():
        SessionFactory(owner=owner, session_key="abc")
    assert Session.objects.filter(session_key="abc").count() == 2


def test_session_cannot_end_before_it_started(owner):
    session = SessionFactory(owner=owner)
    session.ended_at = session.started_at.replace(year=2000)
    with pytest.raises(IntegrityError), transaction.atomic():
        session.save()


def test_checkpoint_trigger_is_checked_by_the_database(owner):
    checkpoint = CheckpointFactory(session__owner=owner)
    with pytest.raises(IntegrityError), transaction.atomic():
        Checkpoint.objects.filter(pk=checkpoint.pk).update(trigger="whenever")


def test_config_is_a_singleton():
    ContinuityConfig.objects.create()
    with pytest.raises(IntegrityError), transaction.atomic():
        ContinuityConfig.objects.create(id=2)


@pytest.mark.parametrize(
    "field_values",
    [
        {"inject_budget_chars": 10_000},
        {"recovery_budget_chars": 5000, "inject_budget_chars": 4000},
        {"prompt_interval": 0},
        {"debounce_seconds": -1},
        {"pressure_warning_percent": 40},
    ],
)
def test_config_rules_hold_in_the_database_too(field_values):
    with pytest.raises(IntegrityError), transaction.atomic():
        ContinuityConfig.objects.create(**field_values)


def test_uuid7_is_version_7_and_sorts_by_time():
    earlier = uuid7(unix_ms=1_700_000_000_000)
    later = uuid7(unix_ms=1_700_000_000_001)
    assert earlier.version == 7
    assert earlier.variant == uuid.RFC_4122
    assert earlier < later
    assert int(earlier.hex[:12], 16) == 1_700_000_000_000
    assert abs(int(uuid7().hex[:12], 16) - time.time_ns() // 1_000_000) < 5_000


def test_uuid7_increases_strictly_within_one_millisecond():
    made = [uuid7() for _ in range(5000)]  # thousands per millisecond
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_checkpoint_ids_follow_creation_order(owner):
    session = SessionFactory(owner=owner)
    made = [CheckpointFactory(session=session).pk for _ in range(5)]
    assert sorted(made) == made


def test_raw_token_is_never_stored(owner):
    token, raw = token_create(owner=owner, name="laptop", scopes=["ingest"])
    assert raw.startswith("sig_")
    assert token.prefix == raw[:12]
    assert token.token_hash != raw
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")  # noqa: S608
        rows = cursor.fetchall()
    dumped = repr(rows)
    assert raw not in dumped
    assert raw[12:] not in dumped  # not even the secret part


def test_scope_checks(owner):
    token, _ = token_create(owner=owner, name="ci", scopes=["read", "ingest"])
    assert token.has_scope("read")
    assert token.has_scope("ingest")
    assert not token.has_scope("write")
    token_revoke(token=token)
    assert not token.has_scope("read")


def test_unknown_scope_is_refused(owner):
    with pytest.raises(ValueError, match="scopes must be among"):
        token_create(owner=owner, name="bad", scopes=["admin"])
    with pytest.raises(ValueError, match="scopes must be among"):
        token_create(owner=owner, name="none", scopes=[])
    assert not ApiToken.objects.exists()


def test_a_cwd_only_session_finds_its_known_git_root_through_an_index(owner):
    for number in range(3):
        SessionFactory(owner=owner, git_root=f"/src/p{number}")
    known = Session.objects.filter(owner=owner, git_root__in=["/src/p1/app", "/src/p1"])
    plan = _plan(known.values_list("git_root", flat=True).distinct())
    assert "session_owner_git_root" in plan


def test_the_project_look_up_as_recovery_runs_it_walks_its_index_without_sorting(owner):
    """The statement ``recovery_find_project`` runs (its newest few candidates, the session's
    summary joined in): the project index, newest first, no sort and no scan of the table."""
    for _ in range(3):
        CheckpointFactory(
            owner=owner, session=SessionFactory(owner=owner, project_normalized="/src/p1")
        )
    statement = recovery._newest_statement("default", recovery._PROJECT)
    since = Checkpoint._meta.get_field("created_at").get_db_prep_value(
        timezone.now() - timedelta(days=7), connection
    )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute(f"EXPLAIN {statement.sql}", [owner.pk, since, "/src/p1", "k"])
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {statement.sql}", [owner.pk, since, "/src/p1", "k"])
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "checkpoint_project_recent" in plan
    assert "TEMP B-TREE" not in plan  # SQLite's sort
    assert "Sort" not in plan  # PostgreSQL's
    assert f"LIMIT {recovery.PROJECT_CANDIDATES}" in statement.sql
