"""The admin: sessions, checkpoints and injections to inspect; settings and tokens to edit."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from checkpoints.models import (
    ApiToken,
    Checkpoint,
    ContinuityConfig,
    Injection,
    Scope,
    Session,
)
from checkpoints.services.config import config_cache_clear, config_get
from checkpoints.services.tokens import token_assign_secret, token_revoke


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


@admin.register(ContinuityConfig)
class ContinuityConfigAdmin(admin.ModelAdmin[ContinuityConfig]):
    """A single settings page: the list view goes straight to the one row."""

    fieldsets = [
        (None, {"fields": ["enabled"]}),
        (
            "Checkpoints",
            {
                "fields": [
                    "prompt_interval",
                    "time_interval_minutes",
                    "debounce_seconds",
                    "max_checkpoints_per_session",
                    "retention_days",
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
        super().save_model(request, obj, form, change)
        # After the commit: a worker reading in between would cache the old row again.
        transaction.on_commit(config_cache_clear)

    def response_change(self, request: HttpRequest, obj: ContinuityConfig) -> HttpResponse:
        messages.success(request, "Continuity settings saved; they apply to the next request.")
        return HttpResponseRedirect(request.path)


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
