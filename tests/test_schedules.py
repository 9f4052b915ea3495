"""The django-q2 schedules: registered once each, following the settings page, and their tasks."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from django_q.models import Schedule

from checkpoints import tasks
from checkpoints.models import Checkpoint, RetentionRun
from checkpoints.services.config import config_get
from checkpoints.services.schedules import IDLE_CLOSE, PRUNE, SWEEP, schedules_ensure
from tests.factories import CheckpointFactory, SessionFactory
from tests.test_admin import CONFIG_CHANGE, config_form

pytestmark = pytest.mark.django_db


def registered():
    return {
        schedule.name: (schedule.func, schedule.minutes, schedule.repeats)
        for schedule in Schedule.objects.all()
    }


def test_setup_schedules_registers_each_task_once_however_often_it_runs():
    out = io.StringIO()
    call_command("setup_schedules", stdout=out)
    call_command("setup_schedules", stdout=out)
    assert registered() == {
        SWEEP: ("checkpoints.tasks.checkpoints_sweep_task", 1, -1),
        PRUNE: ("checkpoints.tasks.retention_prune_task", 60, -1),
        IDLE_CLOSE: ("checkpoints.tasks.sessions_close_idle_task", 5, -1),
    }
    # The first run comes one interval after registration, not at start-up.
    prune = Schedule.objects.get(name=PRUNE)
    assert timezone.now() + timedelta(minutes=59) < prune.next_run
    assert prune.next_run <= timezone.now() + timedelta(minutes=60)
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["created"] * 3 + ["unchanged"] * 3
    assert "every 60 min, next run" in lines[1]


def test_a_changed_cadence_updates_the_schedule_and_brings_its_next_run_forward():
    config = config_get()
    schedules_ensure(config=config)
    Schedule.objects.filter(name=PRUNE).update(next_run=timezone.now() + timedelta(hours=5))
    config.prune_interval_minutes = 15
    states = {state.name: state.change for state in schedules_ensure(config=config)}
    assert states == {SWEEP: "unchanged", PRUNE: "updated", IDLE_CLOSE: "unchanged"}
    prune = Schedule.objects.get(name=PRUNE)
    assert prune.minutes == 15
    assert prune.next_run <= timezone.now() + timedelta(minutes=15)


def test_duplicates_and_retired_schedules_of_ours_are_removed_others_kept():
    config = config_get()
    schedules_ensure(config=config)
    Schedule.objects.create(name=PRUNE, func="checkpoints.tasks.retention_prune_task")
    Schedule.objects.create(name="signet: an old task", func="checkpoints.tasks.gone")
    Schedule.objects.create(name="someone else's", func="elsewhere.task")
    changes = {state.name: state.change for state in schedules_ensure(config=config)}
    assert changes["signet: an old task"] == "removed"
    assert Schedule.objects.filter(name=PRUNE).count() == 1
    assert set(registered()) == {SWEEP, PRUNE, IDLE_CLOSE, "someone else's"}


def test_saving_the_settings_page_re_registers_the_schedules(
    client, superuser, django_capture_on_commit_callbacks
):
    schedules_ensure(config=config_get())
    client.force_login(superuser)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(CONFIG_CHANGE, config_form(prune_interval_minutes=20))
    assert response.status_code == 302
    assert Schedule.objects.get(name=PRUNE).minutes == 20
    assert Schedule.objects.count() == 3


def test_the_settings_page_shows_next_and_last_runs_and_links_the_preview(client, superuser):
    schedules_ensure(config=config_get())
    RetentionRun.objects.create(
        kind=RetentionRun.Kind.PRUNE, duration_seconds=1.25, checkpoints_by_age=42
    )
    client.force_login(superuser)
    page = client.get(CONFIG_CHANGE).content.decode()
    assert "Next prune" in page
    assert "42 by age" in page
    assert "(1.25 s)" in page
    assert reverse("admin:checkpoints_retention_preview") in page


def test_the_admin_preview_is_a_dry_run(client, superuser, owner):
    session = SessionFactory(owner=owner, last_activity_at=timezone.now())
    old = timezone.now() - timedelta(days=30)
    CheckpointFactory(session=session, created_at=old)
    CheckpointFactory(session=session, created_at=old)
    CheckpointFactory(session=session)
    client.force_login(superuser)
    page = client.get(reverse("admin:checkpoints_retention_preview"))
    assert page.status_code == 200
    assert "would delete 2 checkpoint(s)" in page.content.decode()
    assert Checkpoint.objects.count() == 3
    assert not RetentionRun.objects.exists()


def test_the_preview_and_the_run_history_are_for_staff_only(client, owner):
    client.force_login(owner)
    for url in (
        reverse("admin:checkpoints_retention_preview"),
        reverse("admin:checkpoints_retentionrun_changelist"),
    ):
        assert client.get(url).status_code == 302


def test_the_run_history_is_read_only(client, superuser):
    RetentionRun.objects.create(kind=RetentionRun.Kind.PRUNE)
    client.force_login(superuser)
    page = client.get(reverse("admin:checkpoints_retentionrun_changelist"))
    assert page.status_code == 200
    assert b"Add retention run" not in page.content


def test_the_tasks_do_the_work_they_are_scheduled_for(owner):
    session = SessionFactory(owner=owner, last_activity_at=timezone.now())
    CheckpointFactory(session=session, created_at=timezone.now() - timedelta(days=30))
    CheckpointFactory(session=session)
    assert tasks.retention_prune_task() == 1
    assert tasks.checkpoints_sweep_task() == 0
    session.last_activity_at = timezone.now() - timedelta(days=1)
    session.save()
    assert tasks.sessions_close_idle_task() == 1
