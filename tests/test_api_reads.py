"""The read API: every route x {no token, wrong scope, other owner, right owner}."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints.models import Injection, Trigger
from tests.factories import CheckpointFactory, SessionFactory
from tests.hookutil import throttle_statements

pytestmark = pytest.mark.django_db

PROJECT = "/home/alice/src/shop"


@pytest.fixture
def data(owner):
    """Two sessions of the owner's, one continuing the other, with checkpoints."""
    first = SessionFactory(owner=owner, session_key="first", project_normalized=PROJECT)
    second = SessionFactory(
        owner=owner,
        session_key="3f2b8c1e-5d4a-4e7b-9c2f-8a1d6e0b7c42",  # a key that looks like an id
        project_normalized=PROJECT,
        previous_session=first,
    )
    now = timezone.now()
    old = CheckpointFactory(session=first, created_at=now - timedelta(hours=2), prompt_count=10)
    mid = CheckpointFactory(session=second, created_at=now - timedelta(hours=1), prompt_count=3)
    new = CheckpointFactory(
        session=second,
        created_at=now - timedelta(minutes=5),
        trigger=Trigger.PRE_COMPACTION,
        current_task="Finish the export; key AKIAQ3EGSMTLNYWXJ5PV",
        state={"api_key": "sk-live-abcdefghijklmnop", "step": 3},
        prompt_count=7,
    )
    return {"first": first, "second": second, "old": old, "mid": mid, "new": new}


def routes(data):
    second, new = data["second"], data["new"]
    return [
        "/api/checkpoints/",
        f"/api/checkpoints/{second.session_key}/",
        f"/api/checkpoints/{second.session_key}/latest/",
        f"/api/checkpoints/{second.session_key}/{new.id}/",
        "/api/sessions/",
        f"/api/sessions/{second.session_key}/",
        f"/api/recovery/?session={second.session_key}",
    ]


def test_every_route_needs_a_token(api_client, data):
    for url in routes(data):
        response = api_client.get(url)
        assert response.status_code == 401, url
        assert response.json()["error"] == "not_authenticated"


def test_every_route_needs_the_read_scope(client_for, owner, data):
    ingest_only = client_for(owner, "ingest", "write")
    for url in routes(data):
        response = ingest_only.get(url)
        assert response.status_code == 403, url
        assert response.json()["error"] == "permission_denied"


def test_another_owner_sees_nothing_and_cannot_tell_it_exists(client_for, stranger, data):
    other = client_for(stranger, "read")
    lists = {"/api/checkpoints/", "/api/sessions/"}
    for url in routes(data):
        response = other.get(url)
        if url in lists:
            assert response.status_code == 200
            assert response.json()["results"] == []
        else:
            assert response.status_code == 404, url
            assert response.json()["error"] == "not_found"


def test_the_owner_reads_checkpoints_newest_first_with_filters(client_for, owner, data):
    reader = client_for(owner, "read")
    body = reader.get(f"/api/checkpoints/?project={PROJECT}&limit=2").json()
    assert [row["id"] for row in body["results"]] == [str(data["new"].id), str(data["mid"].id)]
    assert body["next"]
    rest = reader.get(body["next"]).json()
    assert [row["id"] for row in rest["results"]] == [str(data["old"].id)]
    only = reader.get("/api/checkpoints/?trigger=pre_compaction").json()["results"]
    assert [row["id"] for row in only] == [str(data["new"].id)]
    assert reader.get("/api/checkpoints/?session=first").json()["results"][0]["prompt_count"] == 10


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=101", "limit=x", "trigger=whenever", "harness=vim", "before=yesterday"],
)
def test_bad_filters_are_400_with_the_field_named(client_for, owner, query):
    response = client_for(owner, "read").get(f"/api/checkpoints/?{query}")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert query.split("=")[0] in body["detail"]


def test_session_checkpoints_oldest_first_and_details(client_for, owner, data):
    reader = client_for(owner, "read")
    key = data["second"].session_key
    rows = reader.get(f"/api/checkpoints/{key}/").json()["results"]
    assert [row["id"] for row in rows] == [str(data["mid"].id), str(data["new"].id)]
    latest = reader.get(f"/api/checkpoints/{key}/latest/").json()
    assert latest["id"] == str(data["new"].id)
    assert latest["state"]["step"] == 3
    one = reader.get(f"/api/checkpoints/{key}/{data['mid'].id}/").json()
    assert one["trigger"] == "periodic"
    # A checkpoint of another session, or no id at all, is not found under this key.
    assert reader.get(f"/api/checkpoints/{key}/{data['old'].id}/").status_code == 404
    assert reader.get(f"/api/checkpoints/{key}/{uuid.uuid4()}/").status_code == 404
    assert reader.get(f"/api/checkpoints/{key}/not-an-id/").status_code == 404
    assert reader.get("/api/checkpoints/no-such-session/").status_code == 404
    assert reader.get("/api/checkpoints/no-such-session/latest/").status_code == 404


def test_secrets_are_redacted_on_the_way_out(client_for, owner, data):
    latest = client_for(owner, "read").get(f"/api/checkpoints/{data['second'].session_key}/latest/")
    text = latest.content.decode()
    assert "AKIAQ3EGSMTLNYWXJ5PV" not in text
    assert "sk-live-abcdefghijklmnop" not in text
    assert latest.json()["state"]["api_key"] == "[REDACTED]"


def test_sessions_with_counts_and_lineage(client_for, owner, data):
    reader = client_for(owner, "read")
    Injection.objects.create(session=data["second"], source="compact", content="x", size_chars=1)
    rows = reader.get("/api/sessions/").json()["results"]
    assert {row["session_key"] for row in rows} == {"first", data["second"].session_key}
    one = reader.get(f"/api/sessions/{data['second'].session_key}/").json()
    assert one["previous_session_key"] == "first"
    assert one["checkpoint_total"] == 2
    assert one["injection_total"] == 1
    assert one["live"] is True


def test_recovery_preview_for_a_session_and_for_a_project(client_for, owner, data):
    reader = client_for(owner, "read")
    body = reader.get(f"/api/recovery/?session={data['second'].session_key}").json()
    assert body["context"].startswith("## Session Recovery Context")
    assert body["checkpoint"]["id"] == str(data["new"].id)
    assert body["match"] == "session"
    assert body["size_chars"] == len(body["context"])
    assert "AKIAQ3EGSMTLNYWXJ5PV" not in body["context"]
    project = reader.get(f"/api/recovery/?project={PROJECT}&budget=300").json()
    assert project["match"] == "project"
    assert len(project["context"]) <= 300
    assert not Injection.objects.exists()  # a preview records nothing
    none = reader.get("/api/recovery/?project=/elsewhere").json()
    assert none == {"context": "", "size_chars": 0, "omitted": [], "checkpoint": None}


@pytest.mark.parametrize("query", ["", "session=a&project=b", "project=x&budget=10"])
def test_recovery_needs_one_target_and_a_sane_budget(client_for, owner, query):
    response = client_for(owner, "read").get(f"/api/recovery/?{query}")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"


def test_list_query_count_is_constant_per_page(client_for, owner, data, django_assert_num_queries):
    reader = client_for(owner, "read")
    reader.get("/api/checkpoints/")  # warm: token last-used write
    for _ in range(20):
        CheckpointFactory(session=data["second"])
    # the throttle (an upsert on PostgreSQL), the page: the same for 3 rows or 10 (the token
    # is known)
    queries = len(throttle_statements()) + 1
    with django_assert_num_queries(queries):
        reader.get("/api/checkpoints/?limit=10")
    with django_assert_num_queries(queries):
        reader.get("/api/sessions/")
