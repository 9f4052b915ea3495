"""Settings as a fresh process sees them: defaults with no environment, and the switches."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from signet_site.bootstrap_config import (
    check_deployment_safety,
    insecure_configuration_reasons,
    load_or_create_secret_key,
)

PROJECT_DIR = Path(__file__).resolve().parent.parent

PROBE = """
import json, django
from django.conf import settings
from django.db import connection
django.setup()
out = {
    "engine": settings.DATABASES["default"]["ENGINE"],
    "name": str(settings.DATABASES["default"]["NAME"]),
    "host": settings.DATABASES["default"].get("HOST", ""),
    "cache": settings.CACHES["default"]["BACKEND"],
    "cache_prefix": settings.CACHES["default"].get("KEY_PREFIX", ""),
    "queue": settings.Q_CLUSTER["name"],
    "broker": "redis" if "redis" in settings.Q_CLUSTER else "orm",
    "debug": settings.DEBUG,
    "prepare_threshold": settings.SIGNET_PREPARE_THRESHOLD,
    "flush_batch": settings.SIGNET_FLUSH_BATCH_SECONDS,
}
if out["engine"].endswith("sqlite3"):
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        out["journal_mode"] = cursor.fetchone()[0]
print(json.dumps(out))
"""


def run_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Import the real settings in a fresh interpreter with only ``env`` set."""
    clean = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "signet_site.settings",
        "SIGNET_DATA_DIR": str(tmp_path / "data"),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=PROJECT_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def probe(tmp_path: Path, **env: str) -> dict[str, Any]:
    result = run_settings(tmp_path, **env)
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_no_environment_means_sqlite_in_wal_mode_under_the_data_dir(tmp_path):
    out = probe(tmp_path)
    assert out["engine"] == "django.db.backends.sqlite3"
    assert out["name"] == str(tmp_path / "data" / "signet.sqlite3")
    assert out["journal_mode"] == "wal"
    assert out["cache"] == "django.core.cache.backends.db.DatabaseCache"
    assert out["broker"] == "orm"
    assert out["debug"] is False
    key_file = tmp_path / "data" / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_database_url_is_honoured(tmp_path):
    out = probe(tmp_path, DATABASE_URL="postgres://signet@db.internal:5433/signet_prod")
    assert out["engine"] == "signet_site.postgresql"  # Django's, checking idle connections only
    assert out["name"] == "signet_prod"
    assert out["host"] == "db.internal"
    assert out["prepare_threshold"] == 5  # the hook path's statements are prepared


def test_prepared_statements_can_be_turned_off_for_a_pooler(tmp_path):
    url = "postgres://signet@db.internal:5433/signet_prod"
    assert (
        probe(tmp_path, DATABASE_URL=url, DATABASE_PREPARE_THRESHOLD="0")["prepare_threshold"] == 0
    )
    refused = run_settings(tmp_path, DATABASE_URL=url, DATABASE_PREPARE_THRESHOLD="-1")
    assert refused.returncode != 0
    assert "DATABASE_PREPARE_THRESHOLD must be 0 (never) or more" in refused.stderr


def test_flush_batch_defaults_to_a_second_and_refuses_a_negative_or_long_one(tmp_path):
    assert probe(tmp_path)["flush_batch"] == 1.0
    assert probe(tmp_path, SIGNET_FLUSH_BATCH_SECONDS="0")["flush_batch"] == 0.0
    for wrong in ("-1", "11"):
        refused = run_settings(tmp_path, SIGNET_FLUSH_BATCH_SECONDS=wrong)
        assert refused.returncode != 0
        assert "SIGNET_FLUSH_BATCH_SECONDS must be between 0 and 10" in refused.stderr


def test_redis_url_moves_cache_and_broker(tmp_path):
    out = probe(tmp_path, REDIS_URL="redis://127.0.0.1:6379/3")
    assert out["cache"] == "django.core.cache.backends.redis.RedisCache"
    assert out["broker"] == "redis"
    assert out["cache_prefix"] == out["queue"] == "signet"


def test_deployments_sharing_a_redis_database_keep_their_keys_apart(tmp_path):
    out = probe(tmp_path, REDIS_URL="redis://127.0.0.1:6379/3", SIGNET_REDIS_PREFIX="team-b")
    assert out["cache_prefix"] == out["queue"] == "team-b"


def test_insecure_configuration_refuses_to_start_and_says_why(tmp_path):
    result = run_settings(tmp_path, ALLOWED_HOSTS="*", SECRET_KEY="short")
    assert result.returncode != 0
    assert "Refusing to start with DEBUG off" in result.stderr
    assert "SECRET_KEY is weak" in result.stderr
    assert "ALLOWED_HOSTS contains '*'" in result.stderr


def test_debug_mode_tolerates_a_development_configuration(tmp_path):
    out = probe(tmp_path, DEBUG="true", ALLOWED_HOSTS="*", SECRET_KEY="dev")
    assert out["debug"] is True


def test_secret_key_is_generated_once_and_reused(tmp_path):
    first = load_or_create_secret_key(tmp_path)
    second = load_or_create_secret_key(tmp_path)
    assert first == second
    assert len(first) >= 50
    assert (
        insecure_configuration_reasons(debug=False, secret_key=first, allowed_hosts=["localhost"])
        == []
    )


@pytest.mark.parametrize(
    ("secret_key", "hosts", "reason"),
    [
        ("django-insecure-" + "a1b2c3d4e5" * 6, ["localhost"], "SECRET_KEY is weak"),
        ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ["x"], "SECRET_KEY is weak"),
        ("k" * 10 + "Zq9-vW3_pL" * 5, [], "ALLOWED_HOSTS is empty"),
        ("k" * 10 + "Zq9-vW3_pL" * 5, [" "], "ALLOWED_HOSTS is empty"),
    ],
)
def test_each_insecure_setting_is_named(secret_key, hosts, reason):
    with pytest.raises(Exception, match=reason):
        check_deployment_safety(debug=False, secret_key=secret_key, allowed_hosts=hosts)
