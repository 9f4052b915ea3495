"""``services/statements.py``: the hook path's statements on the driver's cursor give the
rows, errors and transaction rules Django's cursor would, and are logged when queries are."""

from __future__ import annotations

import psycopg
import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from checkpoints.models import ThrottleCounter
from checkpoints.services.statements import Statement, statement_build, statement_run
from signet_site.postgresql import base as postgresql_base

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


postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="prepared statements: PostgreSQL"
)


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def prepared_statement_names() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def count_select(tag: str = "") -> Statement:
    """``tag``: a comment that makes it a statement of its own (one prepared by an earlier
    test stays prepared on the connection: a rollback keeps it)."""
    comment = f"/* {tag} */ " if tag else ""
    return statement_build(
        alias="default",
        sql=f"{comment}SELECT count FROM {TABLE} WHERE window_end = %s AND bucket = %s",  # noqa: S608
        returns_rows=True,
    )


@postgresql_only
@pytest.mark.parametrize("threshold", [2, 0])
def test_postgresql_prepares_a_statement_once_it_ran_the_threshold_times(settings, threshold):
    settings.SIGNET_PREPARE_THRESHOLD = threshold
    insert("a", 10, 3)
    select = count_select(f"threshold {threshold}")
    for run in range(1, 4):
        assert statement_run(statement=select, params=[10, "a"]).rows == [(3,)]
        ours = [sql for sql in prepared_statements() if f"threshold {threshold}" in sql]
        assert len(ours) == (1 if threshold and run > threshold else 0)  # 0: never


@postgresql_only
def test_djangos_own_queries_are_neither_prepared_nor_counted(settings):
    settings.SIGNET_PREPARE_THRESHOLD = 1
    for _ in range(5):
        list(ThrottleCounter.objects.filter(window_end=987654))
    statement_run(statement=count_select(), params=[10, "a"])
    assert [sql for sql in prepared_statements() if "987654" in sql] == []
    assert connection.connection.prepare_threshold is None  # Django's, between statements


@postgresql_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("in_transaction", [False, True])
def test_a_prepared_statement_whose_table_changed_is_replaced_not_refused_for_ever(
    settings, in_transaction
):
    """A migration on another host changes a column the prepared statement reads:
    PostgreSQL refuses that statement on this connection from then on."""
    settings.SIGNET_PREPARE_THRESHOLD = 1
    insert("a", 10, 3)
    select = count_select()
    for _ in range(2):
        statement_run(statement=select, params=[10, "a"])  # prepared now
    other = psycopg.connect(**connection.get_connection_params(), autocommit=True)
    try:
        other.execute(f"ALTER TABLE {TABLE} ALTER COLUMN count TYPE bigint")
        if in_transaction:

            def begun_then_run() -> None:
                # Begun by a query first: the statement that begins one runs on psycopg's
                # cursor, whose own statements are prepared apart.
                with transaction.atomic():
                    assert ThrottleCounter.objects.filter(bucket="a").exists()
                    statement_run(statement=select, params=[10, "a"])

            with pytest.raises(OperationalError):
                begun_then_run()
            assert connection.close_at == 0.0  # replaced once the request ends
            connection.close_if_unusable_or_obsolete()
        else:
            assert statement_run(statement=select, params=[10, "a"]).rows == [(3,)]
        assert statement_run(statement=select, params=[10, "a"]).rows == [(3,)]
    finally:
        connection.close()  # its session's locks and statements go before the table changes
        other.execute(f"ALTER TABLE {TABLE} ALTER COLUMN count TYPE integer")
        other.close()


@pytest.mark.django_db(transaction=True)
def test_a_statement_that_begins_a_transaction_is_part_of_it():
    """The first statement of an ``atomic`` block is rolled back with the block (on
    PostgreSQL psycopg begins the transaction with it)."""

    def two_then_fail() -> None:
        with transaction.atomic():
            insert("first", 10)
            insert("second", 10)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        two_then_fail()
    insert("after", 10)  # autocommit again
    assert list(ThrottleCounter.objects.values_list("bucket", flat=True)) == ["after"]


@postgresql_only
def test_values_go_and_come_back_as_the_orm_has_them(settings):
    """Parameters are sent untyped, in text: PostgreSQL types each from its column."""
    settings.SIGNET_PREPARE_THRESHOLD = 1
    insert("a", 10, 3)
    select = statement_build(
        alias="default",
        sql=f"SELECT bucket, count, %s::text IS NULL FROM {TABLE} WHERE bucket = %s",  # noqa: S608
        returns_rows=True,
    )
    for _ in range(3):  # unprepared, then prepared
        assert statement_run(statement=select, params=[None, "a"]).rows == [("a", 3, True)]
        assert statement_run(statement=select, params=["ü", "a"]).rows == [("a", 3, False)]


@postgresql_only
def test_a_connection_keeps_at_most_its_share_of_prepared_statements(settings, monkeypatch):
    settings.SIGNET_PREPARE_THRESHOLD = 1
    insert("a", 10, 3)
    ours_before = [name for name in prepared_statement_names() if name.startswith("signet_")]
    monkeypatch.setattr(postgresql_base, "PREPARED_MAX", len(ours_before) + 1)
    first, second = count_select("kept first"), count_select("kept second")
    for _ in range(3):
        assert statement_run(statement=first, params=[10, "a"]).rows == [(3,)]
        assert statement_run(statement=second, params=[10, "a"]).rows == [(3,)]
    ours = prepared_statements()
    assert [sql for sql in ours if "kept first" in sql] != []
    assert [sql for sql in ours if "kept second" in sql] == []  # runs unprepared


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_dropped_is_an_operational_error_then_replaced():
    insert("a", 10, 3)
    select = count_select()
    other = psycopg.connect(**connection.get_connection_params(), autocommit=True)
    try:
        other.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
    finally:
        other.close()
    with pytest.raises(OperationalError):
        statement_run(statement=select, params=[10, "a"])
    assert connection.errors_occurred
    connection.close_if_unusable_or_obsolete()  # as at the end of the request
    assert statement_run(statement=select, params=[10, "a"]).rows == [(3,)]
