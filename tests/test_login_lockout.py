"""Sign-in lockout (django-axes): repeated wrong passwords lock one username from one address.

The admin and the dashboard sign-in pages both go through ``authenticate()`` and so both
lock; the API's bearer tokens do not go through it and keep working.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import F
from django.test import Client
from django.urls import reverse

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's
WRONG = "Tr0ub4dor&3-not-it"
LOGIN_PAGES = ["admin:login", "login"]
HOME = "192.0.2.10"


def sign_in(page: str, username: str, password: str, address: str = HOME) -> int:
    client = Client(REMOTE_ADDR=address)
    return client.post(reverse(page), {"username": username, "password": password}).status_code


def fail_to_the_limit(page: str, username: str, address: str = HOME) -> list[int]:
    return [sign_in(page, username, WRONG, address) for _ in range(settings.AXES_FAILURE_LIMIT)]


@pytest.fixture
def staff(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def other_staff(db):
    return UserFactory(username="ops", is_staff=True, is_superuser=True)


def test_the_limit_is_set():
    assert settings.AXES_FAILURE_LIMIT == 10
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_repeated_failures_lock_the_user_from_that_address(page, staff):
    assert set(fail_to_the_limit(page, "root")) <= {200, 429}
    assert sign_in(page, "root", PASSWORD) == 429  # the right password is refused too


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_a_lockout_leaves_other_users_and_other_addresses_alone(page, staff, other_staff):
    fail_to_the_limit(page, "root")
    assert sign_in(page, "ops", PASSWORD) == 302
    assert sign_in(page, "root", PASSWORD, address="198.51.100.20") == 302


def test_one_failure_short_of_the_limit_still_signs_in(staff):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in("admin:login", "root", WRONG)
    assert sign_in("admin:login", "root", PASSWORD) == 302


def test_a_forged_x_forwarded_for_does_not_escape_the_lockout(staff):
    for n in range(settings.AXES_FAILURE_LIMIT):
        Client(REMOTE_ADDR=HOME, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").post(
            reverse("admin:login"), {"username": "root", "password": WRONG}
        )
    locked = Client(REMOTE_ADDR=HOME, HTTP_X_FORWARDED_FOR="203.0.113.99")
    response = locked.post(reverse("admin:login"), {"username": "root", "password": PASSWORD})
    assert response.status_code == 429


def test_the_lockout_ends_after_the_cool_off(staff):
    fail_to_the_limit("admin:login", "root")
    assert sign_in("admin:login", "root", PASSWORD) == 429
    # The failures age past the cool-off (axes reads its own clock: the rows move instead).
    earlier = settings.AXES_COOLOFF_TIME + timedelta(minutes=1)
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - earlier)
    assert sign_in("admin:login", "root", PASSWORD) == 302


def test_the_api_token_of_a_locked_out_user_keeps_working(owner, client_for):
    fail_to_the_limit("login", "alice")
    assert sign_in("login", "alice", PASSWORD) == 429
    assert client_for(owner, "read").get("/api/whoami/").status_code == 200


def test_programmatic_sign_in_without_a_request_still_works(owner):
    assert Client().login(username="alice", password=PASSWORD)


def test_passwords_are_neither_stored_nor_logged(staff, caplog):
    with caplog.at_level(logging.DEBUG):
        fail_to_the_limit("admin:login", "root")
        sign_in("admin:login", "root", PASSWORD)
    attempt = AccessAttempt.objects.get(username="root")
    assert attempt.ip_address == HOME
    # The right password during the lockout counts as one more failure.
    assert attempt.failures_since_start == settings.AXES_FAILURE_LIMIT + 1
    stored = f"{attempt.get_data} {attempt.post_data}"
    for secret in (WRONG, PASSWORD):
        assert secret not in stored
        assert secret not in caplog.text


def test_an_admin_sees_the_lockout_and_deleting_it_unlocks(staff, other_staff):
    fail_to_the_limit("admin:login", "root")
    admin = Client()
    admin.force_login(other_staff)
    listing = admin.get(reverse("admin:axes_accessattempt_changelist"))
    assert listing.status_code == 200
    assert b"root" in listing.content
    attempt = AccessAttempt.objects.get(username="root")
    delete = reverse("admin:axes_accessattempt_delete", args=[attempt.pk])
    assert admin.post(delete, {"post": "yes"}).status_code == 302
    assert sign_in("admin:login", "root", PASSWORD) == 302
