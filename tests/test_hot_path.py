"""The UserPromptSubmit hot path's query count, pinned."""

from __future__ import annotations

import pytest

from checkpoints.models import Session
from checkpoints.services.config import config_get
from tests.hookutil import payload, send

pytestmark = pytest.mark.django_db


def test_user_prompt_submit_query_count(client_for, owner, django_assert_num_queries):
    hook = client_for(owner, "ingest")
    send(hook, payload("session_start_startup"))
    send(hook, payload("user_prompt_submit"))  # warms the token's last_used and the config
    config_get()
    # With the default database cache (Redis takes 1 and 2 off the database); the token
    # was authenticated moments ago, so this process knows it (SIGNET_TOKEN_CACHE_SECONDS):
    #  1. throttle: one upsert counts the request and returns the count
    #  2. cache: continuity config read
    #  3-6. the event: savepoint, SELECT … FOR UPDATE the session, UPDATE it, release
    #       (a real request has BEGIN/COMMIT where the test has savepoints)
    with django_assert_num_queries(6):
        response = send(hook, payload("user_prompt_submit", prompt="next step please"))
    assert response.status_code == 200
    assert Session.objects.get().prompt_count == 2
