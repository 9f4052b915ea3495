"""The admin: the continuity settings page, tokens, and the read-only evidence."""

from __future__ import annotations

import pytest
from django.urls import reverse

from checkpoints.models import ApiToken, ContinuityConfig
from checkpoints.services.config import config_get
from signet_site import settings as production_settings
from tests.factories import CheckpointFactory, InjectionFactory, SessionFactory

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
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    raw = next(m for m in shown if "will not be shown again" in m).rsplit(" ", 1)[-1]
    token = ApiToken.objects.get(owner=owner)
    assert raw.startswith(token.prefix)
    assert token.token_hash != raw
    assert sorted(token.scopes) == ["ingest", "read"]
    client.logout()
    api = client.get("/api/whoami/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.status_code == 200


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
