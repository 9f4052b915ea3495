"""Health probe, dashboard access, and the admin account set-up."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from checkpoints.services.accounts import admin_ensure
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def test_healthz_needs_no_auth_and_reports_its_checks(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"] == "ok"
    assert body["cache"] == "ok"
    assert body["scheduler"] in {"running", "not running"}
    assert "no-cache" in response["Cache-Control"]


def test_healthz_refuses_writes(client):
    assert client.post("/healthz").status_code == 405


def test_dashboard_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_dashboard_shows_only_the_owners_sessions(client, owner, stranger):
    SessionFactory(owner=owner, session_key="alice-session", project_normalized="/src/a")
    SessionFactory(owner=stranger, session_key="mallory-session", project_normalized="/src/m")
    client.force_login(owner)
    page = client.get("/")
    assert page.status_code == 200
    assert b"alice-session" in page.content
    assert b"mallory-session" not in page.content


def test_admin_is_created_with_a_generated_password_once():
    first = admin_ensure(username="admin", password=None)
    assert first.created
    assert first.password
    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser
    assert user.is_staff
    assert user.check_password(first.password)
    again = admin_ensure(username="admin", password=None)
    assert not again.created
    assert again.password is None
    user.refresh_from_db()
    assert user.check_password(first.password)


def test_admin_password_from_the_environment_wins(monkeypatch):
    admin_ensure(username="admin", password=None)
    monkeypatch.setenv("SIGNET_ADMIN_PASSWORD", "a-long-chosen-passphrase")
    out = io.StringIO()
    call_command("ensure_admin", stdout=out)
    assert "SIGNET_ADMIN_PASSWORD" in out.getvalue()
    assert "a-long-chosen-passphrase" not in out.getvalue()
    assert get_user_model().objects.get(username="admin").check_password("a-long-chosen-passphrase")
