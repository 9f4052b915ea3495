"""``manage.py ensure_admin``: make sure the admin account exists and say how to log in."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand

from checkpoints.services.accounts import AdminLogin, admin_ensure


def admin_login_from_env() -> AdminLogin:
    """Ensure the admin named by ``SIGNET_ADMIN_USER`` (default ``admin``) exists."""
    return admin_ensure(
        username=os.environ.get("SIGNET_ADMIN_USER") or "admin",
        password=os.environ.get("SIGNET_ADMIN_PASSWORD") or None,
    )


def describe_login(login: AdminLogin) -> str:
    """One line telling a person how to log in."""
    if os.environ.get("SIGNET_ADMIN_PASSWORD"):
        return f"login: {login.username} / the password in SIGNET_ADMIN_PASSWORD"
    if login.password is not None:
        return f"login: {login.username} / {login.password}  (generated now, shown only once)"
    return (
        f"login: {login.username} / the password printed at first start "
        "(set SIGNET_ADMIN_PASSWORD and restart to reset it)"
    )


class Command(BaseCommand):
    help = "Create the admin account if missing (SIGNET_ADMIN_USER, SIGNET_ADMIN_PASSWORD)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(describe_login(admin_login_from_env()))
