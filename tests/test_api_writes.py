"""Capturing and deleting checkpoints through the API (``write`` scope)."""

from __future__ import annotations

import json

import pytest

from checkpoints.models import Checkpoint, Session, Trigger
from tests.factories import CheckpointFactory, SessionFactory

pytestmark = pytest.mark.django_db

URL = "/api/checkpoints/"
CAPTURE = {
    "session_key": "agent-run-7",
    "project": "/home/alice/src/shop",
    "trigger": "agent",
    "digest": "## Where I am\nMigrating invoices; token ghp_"
    + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
    "current_task": "Migrate the invoices table",
    "decisions": ["Keep the old column until the backfill ends"],
    "next_steps": ["Backfill", "Drop the old column"],
    "files": ["/home/alice/src/shop/invoices/models.py"],
    "agent_id": "planner",
    "tags": ["migration"],
    "state": {"step": 2, "password": "hunter2-Correct-Horse", "nested": {"ok": [1, 2]}},
}


def post(client, body):
    return client.post(URL, data=json.dumps(body), content_type="application/json")


def test_capture_creates_the_session_and_returns_the_stored_checkpoint(client_for, owner):
    response = post(client_for(owner, "write", "read"), CAPTURE)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["trigger"] == "agent"
    assert body["current_task"] == "Migrate the invoices table"
    assert body["modified_files"] == ["/home/alice/src/shop/invoices/models.py"]
    assert body["state"]["step"] == 2
    assert body["state"]["password"] == "[REDACTED]"
    assert "ghp_Zx9" not in body["digest"]
    assert body["digest"].startswith("## Where I am")
    session = Session.objects.get(owner=owner, session_key="agent-run-7")
    assert session.harness == "api"
    stored = Checkpoint.objects.get()
    assert stored.agent_id == "planner"
    assert "ghp_Zx9" not in stored.digest  # redacted before storage, not only on output
    assert stored.state["password"] == "[REDACTED]"


def test_capture_into_an_existing_session_links_the_parent(client_for, owner):
    session = SessionFactory(owner=owner, session_key="agent-run-7")
    parent = CheckpointFactory(session=session)
    body = post(client_for(owner, "write"), {**CAPTURE, "trigger": "explicit"}).json()
    assert body["parent"] == str(parent.id)
    assert body["trigger"] == Trigger.EXPLICIT


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"session_key": ""}, "session_key"),
        ({"session_key": "a/b"}, "session_key"),
        ({"session_key": "k" * 256}, "session_key"),
        ({"trigger": "periodic"}, "trigger"),
        ({"harness": "vim"}, "harness"),
        ({"decisions": "not a list"}, "decisions"),
        ({"decisions": ["x"] * 51}, "decisions"),
        ({"tags": ["t" * 65]}, "tags"),
        ({"current_task": "x" * 2001}, "current_task"),
        ({"state": {"blob": "x" * 300_000}}, "state"),
    ],
)
def test_each_fields_bounds_are_checked(client_for, owner, change, field):
    response = post(client_for(owner, "write"), {**CAPTURE, **change})
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert field in body["detail"]
    assert not Checkpoint.objects.exists()
    assert not Session.objects.exists()


def test_a_checkpoint_needs_some_content(client_for, owner):
    response = post(client_for(owner, "write"), {"session_key": "s"})
    assert response.status_code == 400
    assert "digest" in json.dumps(response.json()["detail"])


def test_non_json_is_415_and_broken_json_400(client_for, owner):
    writer = client_for(owner, "write")
    form = writer.post(URL, data={"session_key": "s"})  # multipart
    assert form.status_code == 415
    assert form.json()["error"] == "unsupported_media_type"
    broken = writer.post(URL, data="{nope", content_type="application/json")
    assert broken.status_code == 400
    assert broken.json()["error"] == "parse_error"


def test_capture_and_delete_need_the_write_scope(client_for, owner):
    reader = client_for(owner, "read")
    assert post(reader, CAPTURE).status_code == 403
    session = SessionFactory(owner=owner, session_key="s1")
    checkpoint = CheckpointFactory(session=session)
    assert reader.delete(f"{URL}s1/{checkpoint.id}/").status_code == 403
    assert reader.delete(f"{URL}s1/").status_code == 403
    assert Checkpoint.objects.count() == 1


def test_delete_one_and_all(client_for, owner, stranger):
    session = SessionFactory(owner=owner, session_key="s1")
    first = CheckpointFactory(session=session)
    CheckpointFactory.create_batch(2, session=session)
    other = client_for(stranger, "write")
    assert other.delete(f"{URL}s1/{first.id}/").status_code == 404  # not theirs
    assert other.delete(f"{URL}s1/").status_code == 404
    writer = client_for(owner, "write")
    assert writer.delete(f"{URL}s1/{first.id}/").status_code == 204
    assert writer.delete(f"{URL}s1/{first.id}/").status_code == 404  # gone
    assert writer.delete(f"{URL}s1/").json() == {"deleted": 2}
    assert not Checkpoint.objects.exists()
    assert Session.objects.filter(session_key="s1").exists()  # the session stays


def test_unsupported_methods_are_405_in_json(client_for, owner):
    response = client_for(owner, "read", "write").put(URL, data={}, format="json")
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def test_a_body_over_the_limit_is_413(client_for, owner, settings):
    settings.SIGNET_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 50_000
    response = post(client_for(owner, "write"), {**CAPTURE, "digest": "x" * 60_000})
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
    assert not Checkpoint.objects.exists()


def test_without_a_token_nothing_is_written_or_deleted(api_client, owner):
    session = SessionFactory(owner=owner, session_key="s1")
    checkpoint = CheckpointFactory(session=session)
    assert post(api_client, CAPTURE).status_code == 401
    assert api_client.delete(f"{URL}s1/{checkpoint.id}/").status_code == 401
    assert api_client.delete(f"{URL}s1/").status_code == 401
    assert Checkpoint.objects.count() == 1


def test_tag_filter(client_for, owner):
    writer = client_for(owner, "write", "read")
    post(writer, {**CAPTURE, "tags": ["migration", "db", "café"]})
    post(writer, {**CAPTURE, "session_key": "other", "tags": ["migrations-old"]})
    rows = writer.get(f"{URL}?tag=migration").json()["results"]
    assert [row["tags"] for row in rows] == [["migration", "db", "café"]]
    assert len(writer.get(f"{URL}?tag=café").json()["results"]) == 1
    assert writer.get(f"{URL}?tag=nothing").json()["results"] == []
