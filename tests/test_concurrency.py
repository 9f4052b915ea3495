"""Several workers at once: counts and checkpoint decisions stay exact.

Real threads, each with its own database connection, through the real hook URL; on SQLite
(a database file in WAL mode) and on PostgreSQL alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection
from rest_framework.test import APIClient

from checkpoints.models import Checkpoint, Session
from checkpoints.services.config import config_get, config_save
from checkpoints.services.tokens import token_create
from tests.factories import UserFactory
from tests.hookutil import payload, send

THREADS = 20
PROMPTS_PER_THREAD = 50


def run_threads(work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def target(index: int) -> None:
        try:
            work(index)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors[:3]


@pytest.fixture
def ingest_token(transactional_db):
    owner = UserFactory(username="alice")
    config = config_get()
    config.prompt_interval = 10
    config.max_checkpoints_per_session = 500
    config.debounce_seconds = 0
    config_save(config=config)
    _, raw = token_create(owner=owner, name="load", scopes=["ingest"])
    return raw


def client(raw: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def prompt_loop(raw: str, session_key: Callable[[int], str]) -> Callable[[int], None]:
    def work(index: int) -> None:
        api = client(raw)
        for number in range(PROMPTS_PER_THREAD):
            body = payload(
                "user_prompt_submit", session_id=session_key(index), prompt=f"t{index} p{number}"
            )
            response = send(api, body)
            assert response.status_code == 200, response.content

    return work


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_twenty_threads_on_one_session_count_every_prompt_and_checkpoint(ingest_token):
    run_threads(prompt_loop(ingest_token, lambda index: "shared-session"))
    session = Session.objects.get()
    assert session.prompt_count == THREADS * PROMPTS_PER_THREAD
    # One checkpoint per 10 prompts; with no debounce each is written before the next is due.
    checkpoints = Checkpoint.objects.filter(session=session)
    assert checkpoints.count() == THREADS * PROMPTS_PER_THREAD // 10
    assert sorted(checkpoints.values_list("prompt_count", flat=True)) == list(
        range(10, THREADS * PROMPTS_PER_THREAD + 1, 10)
    )
    assert session.checkpoint_pending_since is None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_twenty_threads_on_twenty_sessions_count_exactly(ingest_token):
    run_threads(prompt_loop(ingest_token, lambda index: f"session-{index}"))
    sessions = Session.objects.all()
    assert sessions.count() == THREADS
    for session in sessions:
        assert session.prompt_count == PROMPTS_PER_THREAD
        assert session.checkpoints.count() == PROMPTS_PER_THREAD // 10


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_edits_and_prompts_on_one_session_from_twenty_threads_lose_nothing(ingest_token):
    """Edits take the locked path (the row read and locked, then written back) and prompts
    the unlocked one: each thread's two edits of files of its own stay in the session's list,
    and every prompt is counted, whichever thread wrote the row last."""
    edits, prompts = 2, 5

    def work(index: int) -> None:
        api = client(ingest_token)
        for number in range(prompts):
            body = payload("user_prompt_submit", session_id="shared", prompt=f"t{index} p{number}")
            assert send(api, body).status_code == 200
            if number < edits:
                path = f"/home/alice/projects/webapp/t{index}-{number}.py"
                edit = payload(
                    "post_tool_use_edit",
                    session_id="shared",
                    tool_input={"file_path": path, "old_string": "a", "new_string": "b"},
                    tool_response={"filePath": path},
                )
                assert send(api, edit).status_code == 200

    run_threads(work)
    session = Session.objects.get()
    assert session.prompt_count == THREADS * prompts
    expected = {
        f"/home/alice/projects/webapp/t{i}-{n}.py" for i in range(THREADS) for n in range(edits)
    }
    assert set(session.modified_files) == expected


@pytest.mark.django_db(transaction=True)
def test_sessions_starting_together_in_one_project_write_each_others_work_without_deadlock(
    ingest_token,
):
    # Each start writes the pending work of the project's other sessions, locking their
    # rows while those sessions' own events lock them too.
    def work(index: int) -> None:
        api = client(ingest_token)
        key = f"starter-{index}"
        for source in ("startup", "resume", "resume"):
            response = send(api, payload(f"session_start_{source}", session_id=key))
            assert response.status_code == 200, response.content
            body = payload("user_prompt_submit", session_id=key, prompt=f"t{index} work")
            assert send(api, body).status_code == 200
            body = payload("post_tool_use_edit", session_id=key)
            assert send(api, body).status_code == 200

    run_threads(work)
    assert list(Session.objects.values_list("prompt_count", flat=True).distinct()) == [3]
    # Only the starts write checkpoints here (no interval falls due), each of work done,
    # at most five sessions a start.
    assert 0 < Checkpoint.objects.count() <= THREADS * 3 * 5
    assert all(checkpoint.prompt_count for checkpoint in Checkpoint.objects.all())
