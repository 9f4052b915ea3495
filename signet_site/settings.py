"""Settings for Signet Continuity.

Everything a deployment changes comes from the environment (django-environ). With no
environment at all the service runs on SQLite under ``SIGNET_DATA_DIR`` with the django-q2
ORM broker and a database cache, so one machine needs nothing else. ``DATABASE_URL`` moves
the data to PostgreSQL and ``REDIS_URL`` moves the cache and the task broker to Redis.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import django_stubs_ext
import environ
from django.core.exceptions import ImproperlyConfigured

from signet_site.bootstrap_config import (
    check_deployment_safety,
    data_dir_from_env,
    load_or_create_secret_key,
)

# Lets generic classes (ModelAdmin[Session], QuerySet[...]) be subscripted at run time.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    env.read_env(BASE_DIR / ".env", overwrite=False)

DATA_DIR = data_dir_from_env(BASE_DIR)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="") or load_or_create_secret_key(DATA_DIR)
ALLOWED_HOSTS: list[str] = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS: list[str] = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Behind TLS (a reverse proxy), the cookies must not travel in clear text.
SIGNET_HTTPS = env.bool("SIGNET_HTTPS", default=False)
SESSION_COOKIE_SECURE = SIGNET_HTTPS
CSRF_COOKIE_SECURE = SIGNET_HTTPS
if SIGNET_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

check_deployment_safety(debug=DEBUG, secret_key=SECRET_KEY, allowed_hosts=ALLOWED_HOSTS)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "axes",
    "checkpoints",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "checkpoints.api.middleware.ChunkedBodyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "checkpoints.dashboard.timezone.ViewerTimezoneMiddleware",
    # Last, as django-axes asks: turns a locked-out sign-in into its 429 answer.
    "axes.middleware.AxesMiddleware",
]
# Hook posts (/api/hooks/) are served with these only: no cookie, session, form or page to
# look after, so none of the browser's middleware (``signet_site/handlers.py``).
# CommonMiddleware stays for its check of the Host header against ALLOWED_HOSTS.
HOOK_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "checkpoints.api.middleware.ChunkedBodyMiddleware",
    "django.middleware.common.CommonMiddleware",
]

ROOT_URLCONF = "signet_site.urls"
WSGI_APPLICATION = "signet_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------
SQLITE_PATH = DATA_DIR / "signet.sqlite3"
DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{SQLITE_PATH}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets readers run beside the one writer; IMMEDIATE takes the write lock at
        # BEGIN, so two workers never deadlock upgrading a read lock, they queue on timeout.
        # auto_vacuum first: it only takes on a file that has no tables yet (a new one), and
        # lets the prune hand freed pages back (``services/retention/space.py``).
        "init_command": (
            "PRAGMA auto_vacuum=INCREMENTAL;PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;"
            "PRAGMA busy_timeout=20000;"
        ),
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
elif DATABASES["default"]["ENGINE"].endswith(("postgresql", "postgis")):
    # A server that accepts connections but never answers (a partition, a hung host) held a
    # request thread for ever, /healthz's too: give up connecting after this many seconds,
    # and the request answers 503 (``checkpoints/api/errors.py``). ``?connect_timeout=N`` in
    # DATABASE_URL overrides it.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # Django's, checking only connections that sat idle (``signet_site/postgresql``).
        DATABASES["default"]["ENGINE"] = "signet_site.postgresql"
# Reopening a connection per request costs more than the hook's own work (measured in
# bench/hook_path.py: SQLite p50 10.5 ms -> 7.8 ms), so workers keep theirs.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=600)
# On PostgreSQL, the hook path's statements are prepared on a connection once they ran this
# many times on it (``checkpoints/services/statements.py``); Django's own queries never are.
# 0: never, for a pooler that cannot keep prepared statements (PgBouncer in transaction mode
# before 1.22, or without ``max_prepared_statements``).
SIGNET_PREPARE_THRESHOLD = env.int("DATABASE_PREPARE_THRESHOLD", default=5)
if SIGNET_PREPARE_THRESHOLD < 0:
    raise ImproperlyConfigured("DATABASE_PREPARE_THRESHOLD must be 0 (never) or more")
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache (shared by every worker: the continuity config; with Redis, throttle counters) --
REDIS_URL = env.str("REDIS_URL", default="")
# What this deployment's keys in Redis start with (the cache's, the task queue's): two
# deployments sharing one Redis database would otherwise count each other's throttles.
REDIS_PREFIX = env.str("SIGNET_REDIS_PREFIX", default="signet")
CACHES: dict[str, dict[str, Any]]
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": REDIS_PREFIX,
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "signet_cache",
            "OPTIONS": {"MAX_ENTRIES": 50_000},
        }
    }

# --- Task queue and scheduler (django-q2) --------------------------------------------------
Q_CLUSTER: dict[str, Any] = {
    "name": "signet",
    "workers": env.int("Q_WORKERS", default=2),
    "timeout": 120,
    "retry": 300,
    "max_attempts": 3,
    "catch_up": False,
    "save_limit": 500,
    "label": "Tasks",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
    Q_CLUSTER["name"] = REDIS_PREFIX  # names the queue's keys
else:
    Q_CLUSTER["orm"] = "default"
    Q_CLUSTER["poll"] = 0.5
# A web process queues at most one checkpoint flush task per this many seconds: the marks it
# makes meanwhile ride on it (``checkpoints/services/pending.py``). 0: one task per mark.
SIGNET_FLUSH_BATCH_SECONDS = env.float("SIGNET_FLUSH_BATCH_SECONDS", default=1.0)
if not 0 <= SIGNET_FLUSH_BATCH_SECONDS <= 10:
    raise ImproperlyConfigured("SIGNET_FLUSH_BATCH_SECONDS must be between 0 and 10")

# --- Auth, i18n, static ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Admin and dashboard sign-ins (django-axes): after AXES_FAILURE_LIMIT wrong passwords for
# one username from one address, that pair is refused (429) for the cool-off, right password
# or not. Other users and other addresses are unaffected. The API's tokens never go through
# authenticate(), so they are not concerned.
AUTHENTICATION_BACKENDS = [
    "checkpoints.lockout.LoginLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("SIGNET_LOGIN_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("SIGNET_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "checkpoints.lockout.client_address"
# Failures only: a row per successful sign-in would grow without bound.
AXES_DISABLE_ACCESS_LOG = True
# No banner on every manage.py command.
AXES_VERBOSE = False
# Axes masks "password" always, and these in the request data it stores and in its log
# lines (a password typed into the username field must not end up in a log).
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "csrfmiddlewaretoken"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise expects it before collectstatic has run
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Hook payloads and API bodies: anything larger is refused before it is parsed.
SIGNET_MAX_BODY_BYTES = env.int("SIGNET_MAX_BODY_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = SIGNET_MAX_BODY_BYTES
# Hook posts (/api/hooks/) only: an agent's edit of a large file comes whole, the file in its
# tool's input and again in its result (a Write replacing a 10 MB file carries it up to four
# times). The hook view reads such a body once and keeps only what its adapter reads.
SIGNET_MAX_HOOK_BODY_BYTES = env.int("SIGNET_MAX_HOOK_BODY_BYTES", default=64 * 1024 * 1024)
# The opaque runtime state an explicit checkpoint may carry, as JSON.
SIGNET_MAX_STATE_BYTES = env.int("SIGNET_MAX_STATE_BYTES", default=256 * 1024)

# --- REST framework -----------------------------------------------------------------------
# Reverse proxies in front of the service that append to X-Forwarded-For. 0: the client's
# address is REMOTE_ADDR and X-Forwarded-For is ignored (a client can write anything in it);
# N: the N-th address from the right of X-Forwarded-For. Throttles and login lockout use it.
SIGNET_TRUSTED_PROXIES = env.int("SIGNET_TRUSTED_PROXIES", default=0)
REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["checkpoints.api.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["checkpoints.api.auth.HasTokenScope"],
    "DEFAULT_THROTTLE_CLASSES": ["checkpoints.api.throttles.TokenScopeThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        # A busy agent sends a few events a second at most; ingest must never throttle it.
        "ingest": env.str("SIGNET_THROTTLE_INGEST", default="6000/min"),
        "read": env.str("SIGNET_THROTTLE_READ", default="600/min"),
        "write": env.str("SIGNET_THROTTLE_WRITE", default="120/min"),
        # Per client address: the routes open without a token (the schema), and requests whose
        # token is refused (missing credentials are refused before any counting).
        "anon": env.str("SIGNET_THROTTLE_ANON", default="60/min"),
    },
    "NUM_PROXIES": SIGNET_TRUSTED_PROXIES,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["checkpoints.api.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "checkpoints.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS: dict[str, Any] = {
    "TITLE": "Signet Continuity API",
    "DESCRIPTION": "Session continuity for coding agents: hook ingestion, checkpoints, "
    "sessions and recovery contexts. Authenticate with `Authorization: Bearer <token>`.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The docs page serves Swagger UI from drf-spectacular-sidecar's static files: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "TriggerEnum": "checkpoints.models.Trigger",
        "CaptureTriggerEnum": [("explicit", "Explicit"), ("agent", "Agent narrative")],
    },
}

# --- Continuity defaults (the admin's ContinuityConfig starts from these) -----------------
SIGNET_CONFIG_DEFAULTS: dict[str, Any] = {
    "enabled": env.bool("SIGNET_ENABLED", default=True),
    "prompt_interval": env.int("SIGNET_PROMPT_INTERVAL", default=10),
    "time_interval_minutes": env.int("SIGNET_TIME_INTERVAL_MINUTES", default=15),
    "max_checkpoints_per_session": env.int("SIGNET_MAX_CHECKPOINTS_PER_SESSION", default=50),
    "retention_days": env.int("SIGNET_RETENTION_DAYS", default=7),
    # Never shorter than the checkpoint retention (a session's deletion takes its checkpoints).
    "session_retention_days": env.int(
        "SIGNET_SESSION_RETENTION_DAYS",
        default=max(90, env.int("SIGNET_RETENTION_DAYS", default=7)),
    ),
    "idle_session_minutes": env.int("SIGNET_IDLE_SESSION_MINUTES", default=240),
    "prune_interval_minutes": env.int("SIGNET_PRUNE_INTERVAL_MINUTES", default=60),
    "recovery_budget_chars": env.int("SIGNET_RECOVERY_BUDGET_CHARS", default=2000),
    "inject_budget_chars": env.int("SIGNET_INJECT_BUDGET_CHARS", default=9000),
    "recovery_window_minutes": env.int("SIGNET_RECOVERY_WINDOW_MINUTES", default=240),
    "debounce_seconds": env.float("SIGNET_DEBOUNCE_SECONDS", default=2.5),
    "pressure_notice_percent": env.int("SIGNET_PRESSURE_NOTICE_PERCENT", default=50),
    "pressure_warning_percent": env.int("SIGNET_PRESSURE_WARNING_PERCENT", default=75),
    "pressure_critical_percent": env.int("SIGNET_PRESSURE_CRITICAL_PERCENT", default=90),
}
# After each delete batch the prune pauses this many times as long as the batch held the
# write lock, so hooks keep flowing while it runs (bench/prune.py measures the trade).
SIGNET_PRUNE_PAUSE_RATIO = env.float("SIGNET_PRUNE_PAUSE_RATIO", default=1.0)
# The CPU niceness retention work runs at (django-q2 workers, the prune command), so the web
# workers come first on a shared machine. 0 leaves the priority alone.
SIGNET_BACKGROUND_NICENESS = env.int("SIGNET_BACKGROUND_NICENESS", default=10)
# How long a worker may serve ContinuityConfig from the shared cache; saving it evicts it.
SIGNET_CONFIG_CACHE_SECONDS = env.int("SIGNET_CONFIG_CACHE_SECONDS", default=300)
# How long a web process uses its own copy of it without asking the shared cache; a change
# saved in another process is seen within this bound (0: ask every time).
SIGNET_CONFIG_LOCAL_SECONDS = env.float("SIGNET_CONFIG_LOCAL_SECONDS", default=5.0)
# How long a web process trusts a token it authenticated without asking the database again;
# a revocation made in another process is seen within this bound (0: ask every time).
SIGNET_TOKEN_CACHE_SECONDS = env.float("SIGNET_TOKEN_CACHE_SECONDS", default=5.0)

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
