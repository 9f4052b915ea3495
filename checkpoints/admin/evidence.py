"""Sessions, checkpoints and injections: what the engine recorded, to inspect (read only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from checkpoints.admin.columns import (
    KEY_CHARS,
    OWNER_CHARS,
    PROJECT_CHARS,
    ReadOnlyAdmin,
    list_column,
    session_rows_link,
    short_column,
    time_column,
)
from checkpoints.markdown import render_markdown
from checkpoints.models import (
    Checkpoint,
    Injection,
    Session,
)


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
                    "context_window",
                    "pressure_reminder_count",
                    "pressure_reminder_level",
                    "pressure_agent_acted",
                    "pressure_acted_count",
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
                    "goal",
                    "goal_source",
                    "current_task",
                    "next_steps_list",
                    "agent_next_steps_list",
                    "agent_steps_newer",
                    "decisions_list",
                    "recent_prompts_list",
                    "recent_queries_list",
                    "recent_remembers_list",
                    "modified_files_list",
                    "compact_summary",
                    "summary_prompt",
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
                    "compaction_started_at",
                    "compaction_events",
                    "compaction_recovered",
                    "pressure_reminders_sent",
                    "token_checkpoints_marked",
                    "pressure_reminder_prompt",
                    "ignored_event_count",
                    "delivered_keys",
                    "row_version",
                ],
            },
        ),
    ]

    short_key = short_column("session_key", "session key", limit=KEY_CHARS)
    owner_name = short_column("owner__username", "owner", limit=OWNER_CHARS)
    short_project = short_column(
        "project_normalized", "project", limit=PROJECT_CHARS, keep_end=True
    )
    last_activity = time_column("last_activity_at", "last activity")
    recent_prompts_list = list_column("recent_prompts", "recent prompts")
    recent_queries_list = list_column("recent_queries", "recent memory queries")
    recent_remembers_list = list_column("recent_remembers", "recent remembers")
    modified_files_list = list_column("modified_files", "modified files")
    next_steps_list = list_column("next_steps", "next steps")
    decisions_list = list_column("decisions", "decisions the user stated")
    agent_next_steps_list = list_column("agent_next_steps", "agent's next steps")

    @admin.display(boolean=True)
    def live(self, obj: Session) -> bool:
        return obj.is_live

    @admin.display(description="checkpoints")
    def checkpoints_link(self, obj: Session) -> str:
        return session_rows_link(model="checkpoint", session=obj, count=obj.checkpoints.count())

    @admin.display(description="injections")
    def injections_link(self, obj: Session) -> str:
        return session_rows_link(model="injection", session=obj, count=obj.injections.count())


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
                    "goal",
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

    created = time_column("created_at", "created")
    short_key = short_column("session_key", "session key", limit=KEY_CHARS)
    owner_name = short_column("owner__username", "owner", limit=OWNER_CHARS)
    decisions_list = list_column("decisions", "decisions")
    open_questions_list = list_column("open_questions", "open questions")
    blockers_list = list_column("blockers", "blockers")
    next_steps_list = list_column("next_steps", "next steps")
    modified_files_list = list_column("modified_files", "modified files")
    recent_prompts_list = list_column("recent_prompts", "recent prompts")
    memory_queries_list = list_column("memory_queries", "memory queries")
    recent_remembers_list = list_column("recent_remembers", "recent remembers")
    tags_list = list_column("tags", "tags")

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

    created = time_column("created_at", "created")
    short_key = short_column("session__session_key", "session key", limit=KEY_CHARS)
    owner_name = short_column("session__owner__username", "owner", limit=OWNER_CHARS)
    omitted_list = list_column("omitted", "omitted for space")

    @admin.display(description="size", ordering="size_chars")
    def size(self, obj: Injection) -> str:
        return f"{obj.size_chars:,} chars"

    @admin.display(description="content, as injected")
    def content_text(self, obj: Injection) -> str:
        return format_html('<pre class="signet-injected">{}</pre>', obj.content)
