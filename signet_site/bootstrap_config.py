"""Start-up helpers for the settings module: the data folder, the secret key, safety checks.

Kept apart from ``settings.py`` so they can be tested without re-importing settings.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

SECRET_KEY_FILE = "secret_key"  # noqa: S105 (a file name)
MIN_SECRET_KEY_LENGTH = 50
MIN_SECRET_KEY_UNIQUE_CHARS = 5


def data_dir_from_env(base_dir: Path) -> Path:
    """Return the data folder (``SIGNET_DATA_DIR``, default ``<project>/var``), creating it."""
    raw = os.environ.get("SIGNET_DATA_DIR") or str(base_dir / "var")
    path = Path(raw).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    # It holds the database (prompts, login sessions) and the secret key: owner only.
    # (On a volume that is not ours to change, it stays as the operator set it.)
    with contextlib.suppress(OSError):
        path.chmod(0o700)
    return path


def load_or_create_secret_key(data_dir: Path) -> str:
    """Read the secret key kept in the data folder, generating it on first start.

    The key is written with mode 0600 and O_EXCL, so two processes starting at once cannot
    end up with different keys: the loser of the race reads the winner's file.
    """
    path = data_dir / SECRET_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if key:
            return key
        raise ImproperlyConfigured(
            f"{path} exists but is empty; delete it to generate a new key or set SECRET_KEY."
        ) from None
    key = secrets.token_urlsafe(64)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def insecure_configuration_reasons(
    *, debug: bool, secret_key: str, allowed_hosts: list[str]
) -> list[str]:
    """List what makes this configuration unsafe to serve with DEBUG off (empty when safe)."""
    if debug:
        return []
    reasons = []
    if (
        secret_key.startswith("django-insecure")
        or len(secret_key) < MIN_SECRET_KEY_LENGTH
        or len(set(secret_key)) < MIN_SECRET_KEY_UNIQUE_CHARS
    ):
        reasons.append(
            f"SECRET_KEY is weak (use at least {MIN_SECRET_KEY_LENGTH} random characters, "
            "or leave it unset so one is generated into SIGNET_DATA_DIR)"
        )
    hosts = [host.strip() for host in allowed_hosts if host.strip()]
    if not hosts:
        reasons.append("ALLOWED_HOSTS is empty (list the host names this service answers to)")
    elif "*" in hosts:
        reasons.append("ALLOWED_HOSTS contains '*' (list the host names this service answers to)")
    return reasons


def check_deployment_safety(*, debug: bool, secret_key: str, allowed_hosts: list[str]) -> None:
    """Refuse to start on an insecure configuration when DEBUG is off, saying why."""
    reasons = insecure_configuration_reasons(
        debug=debug, secret_key=secret_key, allowed_hosts=allowed_hosts
    )
    if reasons:
        raise ImproperlyConfigured("Refusing to start with DEBUG off: " + "; ".join(reasons) + ".")
