"""The admin: the continuity settings page, tokens, and the read-only evidence."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.messages import get_messages
from django.urls import reverse

from checkpoints.models import (
    ApiToken,
    Checkpoint,
    ContinuityConfig,
    Injection,
    RetentionRun,
    Session,
)
from checkpoints.services.config import config_get
from signet_site import settings as production_settings
from tests.factories import CheckpointFactory, InjectionFactory, SessionFactory, UserFactory

pytestmark = pytest.mark.django_db

CONFIG_CHANGE = reverse("admin:checkpoints_continuityconfig_change", args=[1])


def config_form(**overrides):
    config = config_get()
    data = {
        field.name: getattr(config, field.name)
        for field in ContinuityConfig._meta.fields
        if field.editable and field.name != "id"
    }
    data.update(overrides)
    if not data["enabled"]:
        data.pop("enabled")
    return data


def test_settings_list_goes_straight_to_the_single_page(client, superuser):
    client.force_login(superuser)
    response = client.get(reverse("admin:checkpoints_continuityconfig_changelist"))
    assert response.status_code == 302
    assert response["Location"] == CONFIG_CHANGE
    page = client.get(CONFIG_CHANGE)
    assert page.status_code == 200
    assert b"Prompt interval" in page.content
    assert b"Add continuity settings" not in page.content


def test_defaults_come_from_the_environment_settings(settings):
    settings.SIGNET_CONFIG_DEFAULTS = {**settings.SIGNET_CONFIG_DEFAULTS, "prompt_interval": 7}
    config = config_get()
    assert config.prompt_interval == 7
    assert config.time_interval_minutes == 15
    assert config.recovery_budget_chars == 2000
    assert config.inject_budget_chars < 10_000
    assert config.recovery_window_minutes == 240
    assert config.debounce_seconds == settings.SIGNET_CONFIG_DEFAULTS["debounce_seconds"]
    assert production_settings.SIGNET_CONFIG_DEFAULTS["debounce_seconds"] == 2.5
    assert (
        config.pressure_notice_percent,
        config.pressure_warning_percent,
        config.pressure_critical_percent,
    ) == (50, 75, 90)


def test_a_saved_change_applies_to_the_next_read_without_restart(
    client, superuser, django_capture_on_commit_callbacks
):
    assert config_get().prompt_interval == 10  # now cached
    client.force_login(superuser)
    with django_capture_on_commit_callbacks(execute=True) as on_commit:
        response = client.post(CONFIG_CHANGE, config_form(prompt_interval=4, retention_days=30))
        assert config_get().prompt_interval == 10  # not before the change is committed
    assert len(on_commit) == 1
    assert response.status_code == 302
    assert config_get().prompt_interval == 4
    assert config_get().retention_days == 30
    assert ContinuityConfig.objects.get().prompt_interval == 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"prompt_interval": -1}, b"greater than or equal to"),
        ({"time_interval_minutes": 0}, b"greater than or equal to 1"),
        ({"inject_budget_chars": 10_000}, b"less than or equal to 9999"),
        ({"recovery_budget_chars": 5000, "inject_budget_chars": 3000}, b"cannot exceed it"),
        ({"pressure_warning_percent": 95}, b"thresholds must rise"),
        ({"debounce_seconds": -0.5}, b"greater than or equal to 0"),
    ],
)
def test_invalid_settings_are_refused_with_a_reason(client, superuser, overrides, message):
    config_get()
    client.force_login(superuser)
    response = client.post(CONFIG_CHANGE, config_form(**overrides))
    assert response.status_code == 200  # the form again, with errors
    assert message in response.content
    assert ContinuityConfig.objects.get().prompt_interval == 10


def test_non_staff_users_are_refused(client, owner):
    client.force_login(owner)
    response = client.get(CONFIG_CHANGE)
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]
    response = client.post(CONFIG_CHANGE, config_form(prompt_interval=2))
    assert response.status_code == 302
    assert config_get().prompt_interval == 10


def test_anonymous_visitors_are_sent_to_login(client):
    response = client.get(CONFIG_CHANGE)
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_adding_a_token_shows_it_once_and_stores_only_its_hash(client, superuser, owner):
    client.force_login(superuser)
    response = client.post(
        reverse("admin:checkpoints_apitoken_add"),
        {"owner": owner.pk, "name": "ci", "scopes": ["read", "ingest"]},
    )
    assert response.status_code == 200  # the secret in this page, not behind a redirect
    raw = re.search(r'<pre[^>]*id="new-token">([^<]+)</pre>', response.content.decode())[1]
    token = ApiToken.objects.get(owner=owner)
    assert raw.startswith(token.prefix)
    assert token.token_hash != raw
    assert sorted(token.scopes) == ["ingest", "read"]
    assert "no-store" in response["Cache-Control"]
    listing = reverse("admin:checkpoints_apitoken_changelist")
    assert f'href="{listing}"'.encode() in response.content  # the way back
    assert client.get(listing).status_code == 200
    client.logout()
    api = client.get("/api/whoami/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.status_code == 200


@pytest.mark.parametrize("button", ["_save", "_continue", "_addanother"])
def test_a_new_tokens_secret_stays_out_of_cookies_messages_and_logs(
    client, superuser, owner, button, caplog
):
    client.force_login(superuser)
    with caplog.at_level(logging.DEBUG):
        response = client.post(
            reverse("admin:checkpoints_apitoken_add"),
            {"owner": owner.pk, "name": "ci", "scopes": ["read"], button: "Save"},
        )
    assert response.status_code == 200
    raw = re.search(r'id="new-token">([^<]+)<', response.content.decode())[1]
    secret = raw[len(ApiToken.objects.get().prefix) :]  # the part no list ever shows
    assert response.content.decode().count(secret) == 1
    for morsel in [*response.cookies.values(), *client.cookies.values()]:
        assert secret not in morsel.value
    assert not [str(m) for m in get_messages(response.wsgi_request)]
    assert all(secret not in str(data) for data in client.session.values())
    assert all(secret not in record.getMessage() for record in caplog.records)
    assert all(secret not in entry.change_message for entry in LogEntry.objects.all())
    assert all(secret not in entry.object_repr for entry in LogEntry.objects.all())
    page = client.get(reverse("admin:checkpoints_apitoken_changelist"))  # the next page
    assert secret not in page.content.decode()


def test_changing_a_token_keeps_its_secret(client, superuser, owner, make_token):
    raw = make_token(owner, "read")
    token = ApiToken.objects.get()
    client.force_login(superuser)
    response = client.post(
        reverse("admin:checkpoints_apitoken_change", args=[token.pk]),
        {"owner": owner.pk, "name": "renamed", "scopes": ["read"]},
    )
    assert response.status_code == 302
    assert ApiToken.objects.get().name == "renamed"
    assert client.get("/api/whoami/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_revoke_action(client, superuser, owner, make_token):
    raw = make_token(owner, "read")
    client.force_login(superuser)
    token = ApiToken.objects.get(owner=owner)
    client.post(
        reverse("admin:checkpoints_apitoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None
    client.logout()
    assert client.get("/api/whoami/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_evidence_pages_load_and_checkpoints_are_read_only(client, superuser, owner):
    session = SessionFactory(owner=owner, session_key="sess-1")
    checkpoint = CheckpointFactory(session=session, digest="## Session Checkpoint\nshop")
    InjectionFactory(session=session, checkpoint=checkpoint)
    client.force_login(superuser)
    for name in ("session", "checkpoint", "injection", "apitoken"):
        listing = client.get(reverse(f"admin:checkpoints_{name}_changelist"))
        assert listing.status_code == 200, name
    assert b"sess-1" in client.get(reverse("admin:checkpoints_session_changelist")).content
    detail = client.get(reverse("admin:checkpoints_checkpoint_change", args=[checkpoint.pk]))
    assert detail.status_code == 200
    assert b'name="digest"' not in detail.content  # shown, not editable
    assert b"Session Checkpoint" in detail.content
    search = client.get(reverse("admin:checkpoints_checkpoint_changelist") + "?q=shop")
    assert b"sess-1" in search.content


def test_workers_racing_to_create_the_settings_row_all_get_it(monkeypatch):
    # Every worker's first request finds no row; all but one lose the insert.
    from checkpoints.services import config as config_module

    real_get = ContinuityConfig.objects.get
    calls = {"n": 0}

    def get_after_another_worker_inserted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            ContinuityConfig.objects.create()  # the other worker wins the race here
            raise ContinuityConfig.DoesNotExist
        return real_get(*args, **kwargs)

    monkeypatch.setattr(ContinuityConfig.objects, "get", get_after_another_worker_inserted)
    config = config_module._config_load_or_create()
    assert config.pk == 1
    assert ContinuityConfig.objects.count() == 1


SAVE_BUTTONS = (b'name="_save"', b'name="_continue"', b'name="_addanother"')


def evidence(owner):
    """A session with a checkpoint, an injection from it, and a retention run."""
    session = SessionFactory(owner=owner)
    checkpoint = CheckpointFactory(session=session)
    injection = InjectionFactory(session=session, checkpoint=checkpoint)
    run = RetentionRun.objects.create(kind=RetentionRun.Kind.PRUNE)
    return {
        "session": session,
        "checkpoint": checkpoint,
        "injection": injection,
        "retentionrun": run,
    }


@pytest.mark.parametrize("name", ["session", "checkpoint", "injection", "retentionrun"])
def test_read_only_pages_show_no_save_buttons_but_keep_delete(client, superuser, owner, name):
    row = evidence(owner)[name]
    client.force_login(superuser)
    page = client.get(reverse(f"admin:checkpoints_{name}_change", args=[row.pk]))
    assert page.status_code == 200
    for button in SAVE_BUTTONS:
        assert button not in page.content, button
    assert reverse(f"admin:checkpoints_{name}_delete", args=[row.pk]).encode() in page.content


def test_the_settings_page_still_saves(client, superuser):
    config_get()
    client.force_login(superuser)
    page = client.get(CONFIG_CHANGE)
    assert b'name="_save"' in page.content


def test_a_post_to_a_read_only_page_is_refused_and_changes_nothing(client, superuser, owner):
    session = SessionFactory(owner=owner, prompt_count=3)
    client.force_login(superuser)
    response = client.post(
        reverse("admin:checkpoints_session_change", args=[session.pk]),
        {"prompt_count": 99, "_save": "Save"},
    )
    assert response.status_code == 403
    session.refresh_from_db()
    assert session.prompt_count == 3


@pytest.mark.parametrize("model", [Session, Checkpoint, Injection])
def test_every_field_of_the_evidence_is_shown_on_its_page(rf, superuser, model):
    # A field left out of the fieldsets would silently vanish from the page.
    request = rf.get("/")
    request.user = superuser
    shown = set(flatten_fieldsets(admin.site._registry[model].get_fieldsets(request)))
    stems = {re.sub(r"_(list|html|text)$", "", name) for name in shown}
    fields = {field.name for field in model._meta.fields if not field.auto_created}
    missing = fields - shown - stems
    assert not missing


def test_the_digest_renders_as_markdown_with_raw_html_escaped(client, superuser, owner):
    checkpoint = CheckpointFactory(
        session=SessionFactory(owner=owner),
        digest="# Title\n\n<script>alert(1)</script>\n\n- one\n\n[x](javascript:alert(2))",
    )
    client.force_login(superuser)
    page = client.get(reverse("admin:checkpoints_checkpoint_change", args=[checkpoint.pk]))
    html = page.content.decode()
    assert "<h1>Title</h1>" in html
    assert "<li>one</li>" in html
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "javascript:alert(2)" not in html.replace("[x](javascript:alert(2))", "")


def test_list_fields_show_as_escaped_html_lists(client, superuser, owner):
    session = SessionFactory(owner=owner, recent_prompts=["fix <b>checkout</b>"])
    checkpoint = CheckpointFactory(
        session=session,
        decisions=["Use PostgreSQL", "Keep <i>SQLite</i> for tests"],
        next_steps=["ship it"],
        tags=[],
    )
    injection = InjectionFactory(session=session, checkpoint=checkpoint, omitted=["decisions"])
    client.force_login(superuser)

    page = client.get(reverse("admin:checkpoints_checkpoint_change", args=[checkpoint.pk]))
    html = page.content.decode()
    assert "<li>Use PostgreSQL</li><li>Keep &lt;i&gt;SQLite&lt;/i&gt; for tests</li>" in html
    assert "<li>ship it</li>" in html
    assert "[&quot;" not in html
    assert "[&#x27;" not in html
    assert "<i>SQLite" not in html

    page = client.get(reverse("admin:checkpoints_session_change", args=[session.pk]))
    assert "<li>fix &lt;b&gt;checkout&lt;/b&gt;</li>" in page.content.decode()

    page = client.get(reverse("admin:checkpoints_injection_change", args=[injection.pk]))
    assert "<li>decisions</li>" in page.content.decode()


def test_token_scopes_show_as_words(client, superuser, owner, make_token):
    make_token(owner, "read", "ingest")
    client.force_login(superuser)
    listing = client.get(reverse("admin:checkpoints_apitoken_changelist")).content.decode()
    assert "Ingest (hooks), Read" in listing
    assert "&#x27;read&#x27;" not in listing
    assert "&quot;read&quot;" not in listing


def test_a_session_page_links_to_its_checkpoints_and_injections(client, superuser, owner):
    session = SessionFactory(owner=owner, session_key="mine")
    other = SessionFactory(owner=owner, session_key="other")
    InjectionFactory(session=session, source="compact")
    InjectionFactory(session=session, source="resume")
    InjectionFactory(session=other, source="startup")
    CheckpointFactory(session=session)
    CheckpointFactory(session=other)
    client.force_login(superuser)
    html = client.get(reverse("admin:checkpoints_session_change", args=[session.pk])).content
    links = {
        noun: href.decode().replace("&amp;", "&")
        for href, noun in re.findall(rb'<a href="([^"]+)">\d+ (checkpoint|injection)s?</a>', html)
    }
    assert b">2 injections</a>" in html
    assert b">1 checkpoint</a>" in html

    injections = client.get(links[b"injection"])
    assert injections.context["cl"].result_count == 2
    assert {i.session_id for i in injections.context["cl"].result_list} == {session.pk}
    checkpoints = client.get(links[b"checkpoint"])
    assert checkpoints.context["cl"].result_count == 1
    assert checkpoints.context["cl"].result_list[0].session_id == session.pk


def test_engine_flags_sit_in_a_collapsed_engine_state_section(client, superuser, owner):
    session = SessionFactory(owner=owner)
    client.force_login(superuser)
    html = client.get(reverse("admin:checkpoints_session_change", args=[session.pk])).content
    fieldsets = re.findall(rb"<fieldset.*?</fieldset>", html, re.DOTALL)
    engine = [f for f in fieldsets if b"Engine state" in f]
    assert len(engine) == 1
    assert b"collapse" in engine[0].split(b">", 1)[0]
    assert b"<details><summary>" in engine[0]
    for flag in (
        "recovery_due",
        "checkpoint_pending_since",
        "changed_since_checkpoint",
        "last_checkpoint_prompt",
        "ignored_event_count",
    ):
        assert f"field-{flag}".encode() in engine[0], flag
        assert html.count(f"field-{flag}".encode()) == 1, flag  # and nowhere else


def test_long_values_are_shortened_in_lists_with_the_full_value_in_a_title(client, superuser):
    key = "0199a4c2-7d1e-7b3a-9f00-5c3e2d1a0b9f"
    project = "/home/alice/src/clients/acme/platform/services/checkout-api"
    owner = UserFactory(username="alice.longname@example.test")
    session = SessionFactory(owner=owner, session_key=key, project_normalized=project)
    SessionFactory(
        owner=UserFactory(username="bob"), session_key="short", project_normalized="/app"
    )
    CheckpointFactory(session=session)
    InjectionFactory(session=session)
    client.force_login(superuser)
    for name in ("session", "checkpoint", "injection"):
        html = client.get(reverse(f"admin:checkpoints_{name}_changelist")).content.decode()
        assert f'<span title="{key}">0199a4c2-…</span>' in html, name
        assert f">{key}<" not in html, name
        assert f'<span title="{owner.username}">alice.longn…</span>' in html, name
    html = client.get(reverse("admin:checkpoints_session_changelist")).content.decode()
    assert f'<span title="{project}">…/services/checkout-api</span>' in html
    assert ">short<" in html
    assert ">/app<" in html
    assert ">bob<" in html


def test_list_times_are_short_and_break_only_between_day_and_time(
    client, superuser, owner, settings
):
    settings.TIME_ZONE = "Europe/Paris"
    moment = datetime(2025, 6, 1, 12, 5, tzinfo=UTC)
    SessionFactory(owner=owner, last_activity_at=moment, started_at=moment)
    client.force_login(superuser)
    html = client.get(reverse("admin:checkpoints_session_changelist")).content.decode()
    assert '<span class="nowrap">2025-06-01</span> 14:05' in html
