"""The admin: sessions, checkpoints and injections to inspect; settings and tokens to edit."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from checkpoints.markdown import render_markdown
from checkpoints.models import (
    ApiToken,
    Checkpoint,
    ContinuityConfig,
    Injection,
    RetentionRun,
    Scope,
    Session,
)
from checkpoints.selectors import retention_overview
from checkpoints.services.config import config_get, config_save
from checkpoints.services.retention import RULE_TITLES, prune_run
from checkpoints.services.tokens import token_assign_secret, token_revoke

# The retention preview runs in a web request: it stops before gunicorn's 30 s timeout.
PREVIEW_SECONDS = 15.0

_ModelT = TypeVar("_ModelT", bound=Model)
Column = Callable[[Any, Any], str]

# List columns keep this many characters of a session key, an owner's name and a project.
KEY_CHARS = 10
OWNER_CHARS = 12
PROJECT_CHARS = 24


def _shortened(value: str, *, limit: int, keep_end: bool = False) -> str:
    """``value`` cut to ``limit`` characters for a list column, whole in its title attribute.

    ``keep_end`` keeps the end of the value (a path's last segments) instead of its start.
    """
    if len(value) <= limit:
        return value or "-"
    if keep_end:
        tail = value[-(limit - 1) :]
        # A path keeps its last whole segments: "…/services/checkout-api".
        short = "…" + tail[max(tail.find("/"), 0) :]
    else:
        short = value[: limit - 1] + "…"
    return format_html('<span title="{}">{}</span>', value, short)


def _moment(value: Any) -> str:
    """A list column's time, short enough to fit: ``2025-06-01 14:05`` in the current zone.

    The line may break between the day and the time, never inside the day.
    """
    if not value:
        return "-"
    local = timezone.localtime(value)
    return format_html('<span class="nowrap">{}</span> {}', f"{local:%Y-%m-%d}", f"{local:%H:%M}")


def _html_list(items: Any) -> str:
    """A JSON list as an HTML list, each item escaped; an empty or absent list as a dash."""
    if not items:
        return "-"
    if not isinstance(items, list):
        items = [items]
    return format_html(
        '<ul class="signet-list">{}</ul>',
        format_html_join(
            "",
            "<li>{}</li>",
            ((item if isinstance(item, str) else json.dumps(item),) for item in items),
        ),
    )


def _session_rows_link(*, model: str, session: Session, count: int) -> str:
    """A link to the ``model`` list filtered to ``session``: "3 checkpoints"."""
    url = reverse(f"admin:checkpoints_{model}_changelist") + f"?session__id__exact={session.pk}"
    return format_html('<a href="{}">{} {}{}</a>', url, count, model, "" if count == 1 else "s")


def _value(obj: Any, path: str) -> Any:
    for name in path.split("__"):
        obj = getattr(obj, name)
    return obj


def _short_column(path: str, description: str, *, limit: int, keep_end: bool = False) -> Column:
    """A list column of the text at ``path`` (``session__session_key``), shortened."""

    @admin.display(description=description, ordering=path)
    def column(model_admin: Any, obj: Any) -> str:
        return _shortened(_value(obj, path), limit=limit, keep_end=keep_end)

    return column


def _time_column(path: str, description: str) -> Column:
    """A list column of the time at ``path``, short enough to fit."""

    @admin.display(description=description, ordering=path)
    def column(model_admin: Any, obj: Any) -> str:
        return _moment(_value(obj, path))

    return column


def _list_field(path: str, description: str) -> Column:
    """A read-only field showing the JSON list at ``path`` as an HTML list."""

    @admin.display(description=description)
    def column(model_admin: Any, obj: Any) -> str:
        return _html_list(_value(obj, path))

    return column


class ReadOnlyAdmin(admin.ModelAdmin[_ModelT]):
    """Rows the engine owns: viewed, and deleted where permitted, but never added or saved.

    Without the change permission Django shows a view page with no Save buttons, and refuses
    a POST to it: a form saving what it read at page load would overwrite counts the engine
    updated meanwhile.
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LiveFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "Live"), ("ended", "Ended")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "live":
            return queryset.filter(ended_at__isnull=True)
        if self.value() == "ended":
            return queryset.filter(ended_at__isnull=False)
        return queryset


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin[Session]):
    # A list at 1280 px beside the admin's two sidebars has room for about seven columns.
    list_display = [
        "short_key",
        "owner_name",
        "harness",
        "short_project",
        "prompt_count",
        "last_activity",
        "live",
    ]
    list_filter = [LiveFilter, "harness", "owner"]
    search_fields = ["session_key", "project", "project_normalized", "git_branch"]
    date_hierarchy = "last_activity_at"
    list_select_related = ["owner"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "owner",
                    "session_key",
                    "harness",
                    "model",
                    "project",
                    "project_normalized",
                    "git_root",
                    "git_branch",
                    "git_head",
                    "transcript_path",
                    "previous_session",
                ]
            },
        ),
        (
            "Activity",
            {
                "fields": [
                    "started_at",
                    "last_activity_at",
                    "ended_at",
                    "end_reason",
                    "prompt_count",
                    "compaction_count",
                    "context_tokens",
                    "context_percent",
                    "last_checkpoint_at",
                    "checkpoints_link",
                    "injections_link",
                ]
            },
        ),
        (
            "Recent work",
            {
                "fields": [
                    "recent_prompts_list",
                    "recent_queries_list",
                    "recent_remembers_list",
                    "modified_files_list",
                    "compact_summary",
                    "last_assistant_message",
                ]
            },
        ),
        (
            "Engine state",
            {
                "classes": ["collapse"],
                "fields": [
                    "recovery_due",
                    "changed_since_checkpoint",
                    "checkpoint_pending_since",
                    "last_checkpoint_prompt",
                    "ignored_event_count",
                ],
            },
        ),
    ]

    short_key = _short_column("session_key", "session key", limit=KEY_CHARS)
    owner_name = _short_column("owner__username", "owner", limit=OWNER_CHARS)
    short_project = _short_column(
        "project_normalized", "project", limit=PROJECT_CHARS, keep_end=True
    )
    last_activity = _time_column("last_activity_at", "last activity")
    recent_prompts_list = _list_field("recent_prompts", "recent prompts")
    recent_queries_list = _list_field("recent_queries", "recent memory queries")
    recent_remembers_list = _list_field("recent_remembers", "recent remembers")
    modified_files_list = _list_field("modified_files", "modified files")

    @admin.display(boolean=True)
    def live(self, obj: Session) -> bool:
        return obj.is_live

    @admin.display(description="checkpoints")
    def checkpoints_link(self, obj: Session) -> str:
        return _session_rows_link(model="checkpoint", session=obj, count=obj.checkpoints.count())

    @admin.display(description="injections")
    def injections_link(self, obj: Session) -> str:
        return _session_rows_link(model="injection", session=obj, count=obj.injections.count())


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin[Checkpoint]):
    """Checkpoints are evidence: they can be read and deleted, never edited."""

    list_display = ["created", "short_key", "owner_name", "trigger", "harness", "prompt_count"]
    list_filter = ["trigger", "harness", "owner"]
    search_fields = ["session_key", "project_normalized", "digest", "current_task"]
    date_hierarchy = "created_at"
    list_select_related = ["owner"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    "created_at",
                    "trigger",
                    "owner",
                    "session",
                    "session_key",
                    "harness",
                    "project_normalized",
                    "parent",
                    "agent_id",
                    "prompt_count",
                    "new_prompts",
                    "context_tokens",
                    "git_branch",
                    "git_head",
                ]
            },
        ),
        ("Digest", {"fields": ["digest_html"]}),
        (
            "Structured fields",
            {
                "fields": [
                    "current_task",
                    "decisions_list",
                    "open_questions_list",
                    "blockers_list",
                    "next_steps_list",
                    "modified_files_list",
                    "recent_prompts_list",
                    "memory_queries_list",
                    "recent_remembers_list",
                    "tags_list",
                    "last_assistant_message",
                ]
            },
        ),
        ("Runtime state", {"classes": ["collapse"], "fields": ["state"]}),
    ]

    created = _time_column("created_at", "created")
    short_key = _short_column("session_key", "session key", limit=KEY_CHARS)
    owner_name = _short_column("owner__username", "owner", limit=OWNER_CHARS)
    decisions_list = _list_field("decisions", "decisions")
    open_questions_list = _list_field("open_questions", "open questions")
    blockers_list = _list_field("blockers", "blockers")
    next_steps_list = _list_field("next_steps", "next steps")
    modified_files_list = _list_field("modified_files", "modified files")
    recent_prompts_list = _list_field("recent_prompts", "recent prompts")
    memory_queries_list = _list_field("memory_queries", "memory queries")
    recent_remembers_list = _list_field("recent_remembers", "recent remembers")
    tags_list = _list_field("tags", "tags")

    @admin.display(description="digest")
    def digest_html(self, obj: Checkpoint) -> str:
        if not obj.digest:
            return "-"
        return format_html('<div class="signet-markdown">{}</div>', render_markdown(obj.digest))


@admin.register(Injection)
class InjectionAdmin(ReadOnlyAdmin[Injection]):
    list_display = ["created", "short_key", "owner_name", "source", "match", "size"]
    list_filter = ["source", "match"]
    search_fields = ["session__session_key", "content"]
    date_hierarchy = "created_at"
    list_select_related = ["session__owner"]
    fields = [
        "created_at",
        "session",
        "source",
        "match",
        "checkpoint",
        "size_chars",
        "omitted_list",
        "content_text",
    ]

    created = _time_column("created_at", "created")
    short_key = _short_column("session__session_key", "session key", limit=KEY_CHARS)
    owner_name = _short_column("session__owner__username", "owner", limit=OWNER_CHARS)
    omitted_list = _list_field("omitted", "omitted for space")

    @admin.display(description="size", ordering="size_chars")
    def size(self, obj: Injection) -> str:
        return f"{obj.size_chars:,} chars"

    @admin.display(description="content, as injected")
    def content_text(self, obj: Injection) -> str:
        return format_html('<pre class="signet-injected">{}</pre>', obj.content)


def _when(moment: Any) -> str:
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}" if moment else "not scheduled"


def _run_summary(run: RetentionRun | None) -> str:
    if run is None:
        return "never"
    if run.kind == RetentionRun.Kind.IDLE_CLOSE:
        counts = f"{run.sessions_closed} session(s) ended"
    else:
        counts = (
            f"{run.checkpoints_by_age} by age, {run.checkpoints_by_cap} by cap, "
            f"{run.checkpoints_by_session_age} with {run.sessions_deleted} expired session(s)"
        )
    return f"{_when(run.started_at)} ({run.duration_seconds:.2f} s): {counts}"


@admin.register(ContinuityConfig)
class ContinuityConfigAdmin(admin.ModelAdmin[ContinuityConfig]):
    """A single settings page: the list view goes straight to the one row."""

    fieldsets = [
        (None, {"fields": ["enabled"]}),
        (
            "Checkpoints",
            {"fields": ["prompt_interval", "time_interval_minutes", "debounce_seconds"]},
        ),
        (
            "Retention (django-q2 runs the prune and the idle-session close)",
            {
                "fields": [
                    "retention_days",
                    "session_retention_days",
                    "max_checkpoints_per_session",
                    "idle_session_minutes",
                    "prune_interval_minutes",
                    "retention_status",
                ]
            },
        ),
        (
            "Recovery",
            {"fields": ["recovery_budget_chars", "inject_budget_chars", "recovery_window_minutes"]},
        ),
        (
            "Context pressure reminders (% of the context window)",
            {
                "fields": [
                    "pressure_notice_percent",
                    "pressure_warning_percent",
                    "pressure_critical_percent",
                ]
            },
        ),
    ]
    readonly_fields = ["retention_status"]

    def get_urls(self) -> list[URLPattern]:
        preview = path(
            "retention-preview/",
            self.admin_site.admin_view(self.retention_preview_view),
            name="checkpoints_retention_preview",
        )
        return [preview, *super().get_urls()]

    @admin.display(description="Runs")
    def retention_status(self, obj: ContinuityConfig) -> str:
        overview = retention_overview()
        rows = [
            ("Next prune", _when(overview.prune_next_run)),
            ("Last prune", _run_summary(overview.last_prune)),
            ("Next idle check", _when(overview.idle_close_next_run)),
            ("Last idle close", _run_summary(overview.last_idle_close)),
        ]
        return format_html(
            '<table class="signet-retention">{}</table>'
            '<p><a href="{}">Preview what the prune would delete now</a> · '
            '<a href="{}">All runs</a></p>',
            format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
            reverse("admin:checkpoints_retention_preview"),
            reverse("admin:checkpoints_retentionrun_changelist"),
        )

    def retention_preview_view(self, request: HttpRequest) -> HttpResponse:
        """The dry run of the prune under the saved policy: exactly what a run would delete."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        report = prune_run(dry_run=True, max_seconds=PREVIEW_SECONDS)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Retention preview",
            "report": report,
            "rules": [
                {"title": RULE_TITLES[rule], "tally": tally} for rule, tally in report.rules.items()
            ],
            "report_text": "\n".join(report.lines(projects=20)),
        }
        return TemplateResponse(request, "admin/checkpoints/retention_preview.html", context)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        config = config_get()
        return HttpResponseRedirect(
            reverse("admin:checkpoints_continuityconfig_change", args=[config.pk])
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(
        self, request: HttpRequest, obj: ContinuityConfig, form: Any, change: bool
    ) -> None:
        # The service saves, evicts every worker's cached copy and re-registers the schedules.
        config_save(config=obj)

    def response_change(self, request: HttpRequest, obj: ContinuityConfig) -> HttpResponse:
        messages.success(
            request,
            "Continuity settings saved; they apply to the next request, and the schedules "
            "follow them.",
        )
        return HttpResponseRedirect(request.path)


@admin.register(RetentionRun)
class RetentionRunAdmin(ReadOnlyAdmin[RetentionRun]):
    """The history of prune and idle-close runs: read only."""

    list_display = [
        "started",
        "kind",
        "duration",
        "checkpoints_deleted",
        "sessions_deleted",
        "sessions_closed",
        "reclaimed",
    ]
    list_filter = ["kind"]
    date_hierarchy = "started_at"

    started = _time_column("started_at", "started")

    @admin.display(description="duration", ordering="duration_seconds")
    def duration(self, obj: RetentionRun) -> str:
        return f"{obj.duration_seconds:.2f} s"

    @admin.display(description="checkpoints deleted")
    def checkpoints_deleted(self, obj: RetentionRun) -> int:
        return obj.checkpoints_deleted

    @admin.display(description="space reclaimed", ordering="bytes_reclaimed")
    def reclaimed(self, obj: RetentionRun) -> str:
        return "-" if obj.bytes_reclaimed is None else filesizeformat(obj.bytes_reclaimed)


class ApiTokenForm(forms.ModelForm[ApiToken]):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, required=True
    )

    class Meta:
        model = ApiToken
        fields = ["owner", "name", "scopes", "revoked_at"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    form = ApiTokenForm
    list_display = ["name", "prefix", "owner_name", "scope_names", "created", "last_used", "active"]
    list_filter = ["owner"]
    search_fields = ["name", "prefix", "owner__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    list_select_related = ["owner"]
    actions = ["revoke_tokens"]

    @admin.display(boolean=True)
    def active(self, obj: ApiToken) -> bool:
        return obj.is_active

    owner_name = _short_column("owner__username", "owner", limit=OWNER_CHARS)
    created = _time_column("created_at", "created")
    last_used = _time_column("last_used_at", "last used")

    @admin.display(description="scopes")
    def scope_names(self, obj: ApiToken) -> str:
        known = [label for value, label in Scope.choices if value in obj.scopes]
        unknown = [str(value) for value in obj.scopes if value not in Scope.values]
        return ", ".join(known + unknown) or "-"

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        raw = token_assign_secret(token=obj)
        super().save_model(request, obj, form, change)
        messages.warning(request, f"Token created. Copy it now, it will not be shown again: {raw}")

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token_revoke(token=token)
        messages.success(request, f"Revoked {queryset.count()} token(s).")
