"""Accounts: the admin the service ensures, and the dashboard users people create."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model


@dataclass(frozen=True)
class AdminLogin:
    username: str
    password: str | None  # set only when generated or changed now: it is shown this once
    created: bool


def admin_ensure(*, username: str, password: str | None) -> AdminLogin:
    """Make sure a superuser ``username`` exists.

    With ``password`` given (``SIGNET_ADMIN_PASSWORD``) the account's password is set to it,
    so the environment stays the source of truth. Without it a new account gets a generated
    password, returned once; an existing account keeps its own.
    """
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    created = user is None
    if user is None:
        user = user_model(username=username, is_staff=True, is_superuser=True)
        shown: str | None = password or secrets.token_urlsafe(12)
        user.set_password(shown)
        user.save()
        return AdminLogin(username=username, password=shown, created=created)
    changed = False
    if not (user.is_staff and user.is_superuser and user.is_active):
        user.is_staff = user.is_superuser = user.is_active = True
        changed = True
    if password and not user.check_password(password):
        user.set_password(password)
        changed = True
    if changed:
        user.save()
    return AdminLogin(username=username, password=None, created=False)


@dataclass(frozen=True)
class AccountLogin:
    username: str
    password: str | None  # set only when generated now: it is shown this once
    created: bool


def account_ensure(*, username: str, password: str | None = None) -> AccountLogin:
    """Make sure ``username`` exists, is active and can log in to the dashboard.

    With ``password`` given, the account's password becomes it. Without it, an account that
    has no usable password (new, or made by an older ``create_token``) gets a generated one,
    returned once; an account with a password keeps it. Staff rights are left as they are:
    the dashboard needs none.
    """
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=username)
    shown: str | None = None
    fields: list[str] = []
    if password:
        user.set_password(password)
        fields.append("password")
    elif not user.password or not user.has_usable_password():
        shown = secrets.token_urlsafe(12)
        user.set_password(shown)
        fields.append("password")
    if not user.is_active:
        user.is_active = True
        fields.append("is_active")
    if fields:
        user.save(update_fields=fields)
    return AccountLogin(username=username, password=shown, created=created)
