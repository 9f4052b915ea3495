"""The admin: sessions, checkpoints and injections to inspect; settings and tokens to edit."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

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
class SessionAdmin(admin.ModelAdmin[Session]):
    list_display = [
        "session_key",
        "owner",
        "harness",
        "project_normalized",
        "prompt_count",
        "compaction_count",
        "last_activity_at",
        "live",
    ]
    list_filter = [LiveFilter, "harness", "owner"]
    search_fields = ["session_key", "project", "project_normalized", "git_branch"]
    date_hierarchy = "last_activity_at"
    list_select_related = ["owner"]
    raw_id_fields = ["previous_session"]

    def get_readonly_fields(self, request: HttpRequest, obj: Session | None = None) -> list[str]:
        # The engine owns every field: an admin form saving what it read at page load
        # would overwrite counts the engine updated meanwhile. Sessions are read or deleted.
        return [field.name for field in Session._meta.fields] + ["checkpoints_link"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(boolean=True)
    def live(self, obj: Session) -> bool:
        return obj.is_live

    @admin.display(description="checkpoints")
    def checkpoints_link(self, obj: Session) -> str:
        url = reverse("admin:checkpoints_checkpoint_changelist") + f"?session__id__exact={obj.pk}"
        return format_html('<a href="{}">{} checkpoints</a>', url, obj.checkpoints.count())


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin[Checkpoint]):
    """Checkpoints are evidence: they can be read and deleted, never edited."""

    list_display = ["short_id", "session_key", "trigger", "harness", "prompt_count", "created_at"]
    list_filter = ["trigger", "harness", "owner"]
    search_fields = ["session_key", "project_normalized", "digest", "current_task"]
    date_hierarchy = "created_at"
    list_select_related = ["owner"]

    def get_readonly_fields(self, request: HttpRequest, obj: Checkpoint | None = None) -> list[str]:
        return [field.name for field in Checkpoint._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Checkpoint) -> str:
        return str(obj.id)[:13]


@admin.register(Injection)
class InjectionAdmin(admin.ModelAdmin[Injection]):
    list_display = ["session", "source", "match", "size_chars", "checkpoint", "created_at"]
    list_filter = ["source", "match"]
    search_fields = ["session__session_key", "content"]
    date_hierarchy = "created_at"
    list_select_related = ["session"]

    def get_readonly_fields(self, request: HttpRequest, obj: Injection | None = None) -> list[str]:
        return [field.name for field in Injection._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


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
class RetentionRunAdmin(admin.ModelAdmin[RetentionRun]):
    """The history of prune and idle-close runs: read only."""

    list_display = [
        "started_at",
        "kind",
        "duration",
        "checkpoints_by_age",
        "checkpoints_by_cap",
        "checkpoints_by_session_age",
        "sessions_deleted",
        "sessions_closed",
        "bytes_reclaimed",
    ]
    list_filter = ["kind"]
    date_hierarchy = "started_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="duration", ordering="duration_seconds")
    def duration(self, obj: RetentionRun) -> str:
        return f"{obj.duration_seconds:.2f} s"


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
    list_display = ["name", "prefix", "owner", "scopes", "created_at", "last_used_at", "active"]
    list_filter = ["owner"]
    search_fields = ["name", "prefix", "owner__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    list_select_related = ["owner"]
    actions = ["revoke_tokens"]

    @admin.display(boolean=True)
    def active(self, obj: ApiToken) -> bool:
        return obj.is_active

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
