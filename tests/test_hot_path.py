"""The hook hot path's statements, pinned: a prompt, a prompt that writes its due checkpoint
(reads without a lock, then one short transaction), and what a locked event writes back."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.conf import Conf

from checkpoints.models import Checkpoint, Session
from checkpoints.services.config import config_cache_clear, config_get, config_save
from tests.hookutil import payload, send, throttle_statements

pytestmark = pytest.mark.django_db


def test_user_prompt_submit_query_count(client_for, owner, django_assert_num_queries):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit"))  # warms the token's last_used and the config
    config_get()
    # With the default database cache (Redis takes 1 off the database). The token was
    # authenticated moments ago, and the continuity config read, so this process knows both
    # (SIGNET_TOKEN_CACHE_SECONDS, SIGNET_CONFIG_LOCAL_SECONDS):
    #  1. throttle: on PostgreSQL one upsert counts the request and returns the count; on
    #     SQLite the count is kept in a file, not the database (throttle_statements)
    #  2. the session row, read without a lock
    #  3. one UPDATE writes it back if no one wrote it since (engine._prompt_unlocked)
    throttle = throttle_statements()
    with django_assert_num_queries(len(throttle) + 2) as captured:
        response = send(hook, payload("user_prompt_submit", prompt="next step please"))
    statements = [query["sql"].split()[0].upper() for query in captured.captured_queries]
    assert statements == [*throttle, "SELECT", "UPDATE"]
    assert response.status_code == 200
    assert Session.objects.get().prompt_count == 2


def test_a_locked_event_writes_back_only_the_columns_it_changed(client_for, owner):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit", prompt="Refactor the parser"))
    with CaptureQueriesContext(connection) as captured:
        response = send(hook, payload("post_tool_use_write"))
    assert response.status_code == 200
    updates = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    assigned = updates[0].split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert '"modified_files"' in assigned
    assert '"last_activity_at"' not in assigned  # within the minute it is kept to
    assert '"row_version"' in assigned  # raised, so an unlocked prompt that read before retries
    assert '"recent_prompts"' not in assigned  # unchanged: not written back
    session = Session.objects.get()
    assert session.recent_prompts == ["Refactor the parser"]
    assert session.modified_files == [payload("post_tool_use_write")["tool_input"]["file_path"]]


@pytest.mark.django_db(transaction=True)  # real transactions, not the test's savepoints
def test_a_prompt_writes_its_due_checkpoint_in_one_short_transaction(
    client_for, owner, monkeypatch
):
    # The flush task queued at the mark stays queued, as it waits out the debounce in a
    # deployment; the suite's tasks otherwise run at once, and it would write the checkpoint.
    monkeypatch.setattr(Conf, "SYNC", False)
    config = config_get()
    config.prompt_interval = 2
    config_save(config=config)
    config_cache_clear()
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit", prompt="one"))
    send(hook, payload("user_prompt_submit", prompt="two"))  # marks one (no debounce here)
    config_get()
    with CaptureQueriesContext(connection) as captured:
        send(hook, payload("user_prompt_submit", prompt="three"))  # and this one writes it
    # Read with no write lock held: the row for the prompt, which finds the checkpoint due,
    # then the whole row for the checkpoint, and its parent. Then one transaction: the row
    # written back if unchanged since, the checkpoint, and the per-session cap's look-up.
    outside, inside = _statements(captured)
    assert outside == [
        *(f"{verb} checkpoints_throttlecounter" for verb in throttle_statements()),
        "SELECT checkpoints_session",
        "SELECT checkpoints_session",
        "SELECT checkpoints_checkpoint",
    ]
    written = ["UPDATE checkpoints_session", "INSERT checkpoints_checkpoint"]
    capped = ["SELECT checkpoints_checkpoint"]  # its oldest beyond the cap: none to delete
    assert [[statement for statement, _ in transaction] for transaction in inside] == [
        [*written, *capped]
    ]
    update = inside[0][0][1]
    assert '"harness"' not in update.split(" WHERE ")[0]  # read, not changed
    assert Checkpoint.objects.get().recent_prompts == ["one", "two"]  # written before "three"
    session = Session.objects.get()
    assert (session.prompt_count, session.checkpoint_pending_since) == (3, None)


_TABLE = re.compile(r'(?:FROM|UPDATE|INTO)\s+"([^"]+)"')


def _statements(
    captured: CaptureQueriesContext,
) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """The captured statements outside any transaction ("VERB table"), and each
    transaction's ("VERB table", its SQL)."""
    outside: list[str] = []
    transactions: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] | None = None
    for query in captured.captured_queries:
        sql = query["sql"]
        verb = sql.split()[0].upper()
        if verb == "BEGIN":
            current = []
        elif verb == "COMMIT":
            assert current is not None
            transactions.append(current)
            current = None
        else:
            named = f"{verb} {_TABLE.search(sql).group(1)}"  # type: ignore[union-attr]
            if current is None:
                outside.append(named)
            else:
                current.append((named, sql))
    return outside, transactions


@pytest.mark.django_db(transaction=True)  # real transactions, not the test's savepoints
def test_a_new_sessions_first_prompt_reads_outside_its_transactions(client_for, owner):
    hook = client_for(owner, "ingest")
    send(hook, payload("user_prompt_submit", session_id="earlier", prompt="Ship the export"))
    send(hook, payload("pre_compact_manual", session_id="earlier"))  # something to recover
    with CaptureQueriesContext(connection) as captured:
        response = send(hook, payload("user_prompt_submit", session_id="new", prompt="go on"))
    assert "Ship the export" in response.json()["hookSpecificOutput"]["additionalContext"]
    # The project, the recovery's checkpoint: looked up with no write lock held. One
    # transaction writes the new row, the prompt applied, with the audit of the context it
    # injected, kept if and only if the prompt is.
    _, inside = _statements(captured)
    transactions = [[statement for statement, _ in transaction] for transaction in inside]
    assert transactions == [["INSERT checkpoints_session", "INSERT checkpoints_injection"]]
    checkpoint_reads = [
        query["sql"]
        for query in captured.captured_queries
        if query["sql"].startswith("SELECT") and 'FROM "checkpoints_checkpoint"' in query["sql"]
    ]
    assert len(checkpoint_reads) == 1  # the project's latest; a new session has none
    session = Session.objects.get(session_key="new")
    assert (session.prompt_count, session.recovery_due, session.row_version) == (1, False, 0)
    assert session.injections.get().source == "prompt"


@pytest.mark.django_db(transaction=True)  # real transactions, not the test's savepoints
def test_a_first_prompt_with_nothing_to_recover_is_one_insert_outside_any_transaction(
    client_for, owner
):
    hook = client_for(owner, "ingest")
    config_get()  # the policy's row, made on first use
    with CaptureQueriesContext(connection) as captured:
        response = send(hook, payload("user_prompt_submit", session_id="new", prompt="go on"))
    assert response.json() == {}
    # Nothing written beside the row: its INSERT is its own transaction, with no BEGIN and
    # COMMIT around it (two round trips fewer on PostgreSQL).
    outside, inside = _statements(captured)
    assert inside == []
    # The row (none yet), the known git top-levels, the project's latest checkpoint (none).
    assert [statement for statement in outside if "checkpoints_apitoken" not in statement] == [
        *(f"{verb} checkpoints_throttlecounter" for verb in throttle_statements()),
        "SELECT checkpoints_session",
        "SELECT checkpoints_session",
        "SELECT checkpoints_checkpoint",
        "INSERT checkpoints_session",
    ]
    session = Session.objects.get(session_key="new")
    assert (session.prompt_count, session.recent_prompts) == (1, ["go on"])
