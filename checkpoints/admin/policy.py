"""The continuity settings page (retention status and its dry-run preview) and the run history."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from checkpoints.admin.columns import (
    ReadOnlyAdmin,
    time_column,
)
from checkpoints.models import (
    ContinuityConfig,
    RetentionRun,
)
from checkpoints.selectors import retention_overview
from checkpoints.services.config import config_get, config_save
from checkpoints.services.retention import RULE_TITLES, prune_preview


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
                    "pressure_notice_text",
                    "pressure_warning_percent",
                    "pressure_warning_text",
                    "pressure_critical_percent",
                    "pressure_critical_text",
                    "pressure_acted_turns",
                ]
            },
        ),
        (
            "Context windows and token checkpoints",
            {
                "fields": [
                    "context_window_default",
                    "context_window_1m",
                    "token_checkpoint_percents",
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
        report = prune_preview()
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
            "Continuity settings saved; every worker applies them within "
            "SIGNET_CONFIG_LOCAL_SECONDS (5 s by default), and the schedules follow them.",
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

    started = time_column("started_at", "started")

    @admin.display(description="duration", ordering="duration_seconds")
    def duration(self, obj: RetentionRun) -> str:
        return f"{obj.duration_seconds:.2f} s"

    @admin.display(description="checkpoints deleted")
    def checkpoints_deleted(self, obj: RetentionRun) -> int:
        return obj.checkpoints_deleted

    @admin.display(description="space reclaimed", ordering="bytes_reclaimed")
    def reclaimed(self, obj: RetentionRun) -> str:
        return "-" if obj.bytes_reclaimed is None else filesizeformat(obj.bytes_reclaimed)
