"""``services/statements.py``: the hook path's statements on the driver's cursor give the
rows, errors and transaction rules Django's cursor would, and are logged when queries are."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from checkpoints.models import ThrottleCounter
from checkpoints.services.statements import statement_build, statement_run

pytestmark = pytest.mark.django_db

TABLE = connection.ops.quote_name(ThrottleCounter._meta.db_table)


def insert(bucket: str, window_end: int, count: int = 1) -> None:
    statement = statement_build(
        alias="default",
        sql=f"INSERT INTO {TABLE} (bucket, window_end, count) VALUES (%s, %s, %s)",  # noqa: S608
        returns_rows=False,
    )
    statement_run(statement=statement, params=[bucket, window_end, count])


def test_placeholders_become_the_drivers_once():
    statement = statement_build(
        alias="default", sql="SELECT 1 WHERE 'a%%s' <> %s AND %s = %s", returns_rows=True
    )
    if connection.vendor == "sqlite":
        assert statement.native == "SELECT 1 WHERE 'a%s' <> ? AND ? = ?"
    else:
        assert statement.native == statement.sql


def test_rows_and_row_counts_are_the_statements():
    insert("a", 10, 3)
    insert("b", 10, 5)
    select = statement_build(
        alias="default",
        sql=f"SELECT bucket, count FROM {TABLE} WHERE window_end = %s ORDER BY bucket",  # noqa: S608
        returns_rows=True,
    )
    assert statement_run(statement=select, params=[10]).rows == [("a", 3), ("b", 5)]
    assert statement_run(statement=select, params=[11]).rows == []
    update = statement_build(
        alias="default",
        sql=f"UPDATE {TABLE} SET count = count + 1 WHERE window_end = %s",  # noqa: S608
        returns_rows=False,
    )
    outcome = statement_run(statement=update, params=[10])
    assert (outcome.rowcount, outcome.rows) == (2, [])
    assert sorted(ThrottleCounter.objects.values_list("count", flat=True)) == [4, 6]


def test_a_driver_error_is_djangos_and_rolls_back_only_its_block():
    insert("a", 10)
    # Django's class, as its own cursor would raise
    with pytest.raises(IntegrityError), transaction.atomic():
        insert("a", 10)
    assert ThrottleCounter.objects.count() == 1


def test_a_failed_transaction_refuses_the_next_statement():
    insert("a", 10)
    with transaction.atomic():
        with pytest.raises(IntegrityError), transaction.atomic(savepoint=False):
            insert("a", 10)  # no savepoint to return to: only a rollback may follow
        with pytest.raises(TransactionManagementError):
            insert("b", 10)
    assert list(ThrottleCounter.objects.values_list("bucket", flat=True)) == ["a"]


def test_statements_are_logged_when_queries_are():
    with CaptureQueriesContext(connection) as captured:
        insert("a", 10, 2)
    assert len(captured.captured_queries) == 1
    assert captured.captured_queries[0]["sql"].startswith(f"INSERT INTO {TABLE}")
    assert ThrottleCounter.objects.get().count == 2


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements: PostgreSQL")
@pytest.mark.parametrize("threshold", [2, None])
def test_postgresql_prepares_a_statement_once_it_ran_the_threshold_times(threshold):
    connection.ensure_connection()
    kept = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = threshold
    try:
        insert("a", 10, 3)
        select = statement_build(
            alias="default",
            sql=f"SELECT count FROM {TABLE} WHERE window_end = %s AND bucket = %s",  # noqa: S608
            returns_rows=True,
        )
        for _ in range(3):
            assert statement_run(statement=select, params=[10, "a"]).rows == [(3,)]
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            prepared = [row[0] for row in cursor.fetchall()]
    finally:
        connection.connection.prepare_threshold = kept
    ours = [sql for sql in prepared if "window_end = $1 AND bucket = $2" in sql]
    assert len(ours) == (1 if threshold else 0)
    # Django's own queries are never prepared: they bind on the client.
    assert not [sql for sql in prepared if "window_end = 10" in sql]
