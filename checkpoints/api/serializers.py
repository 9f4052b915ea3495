"""Output (and query) serializers of the read API. Every text is redacted on the way out."""

from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers

from checkpoints.harnesses.base import identifier_problem
from checkpoints.models import Checkpoint, Harness, Session, Trigger
from checkpoints.services.redaction import redact_data
from checkpoints.services.store import CheckpointContent, checkpoint_capture

MAX_PAGE = 100


class RedactedOutput(serializers.ModelSerializer[Any]):
    """Redacts every string of the representation: rows written before a rule existed, or
    by a path that missed one, must still not leak a secret."""

    def to_representation(self, instance: Any) -> Any:
        return redact_data(super().to_representation(instance))


CHECKPOINT_FIELDS = [
    "id",
    "session_key",
    "project_normalized",
    "harness",
    "trigger",
    "parent",
    "prompt_count",
    "created_at",
    "agent_id",
    "tags",
    "goal",
    "current_task",
    "decisions",
    "open_questions",
    "blockers",
    "next_steps",
    "modified_files",
    "recent_prompts",
    "memory_queries",
    "recent_remembers",
    "last_assistant_message",
    "git_branch",
    "git_head",
    "context_tokens",
    "digest",
]


class CheckpointSerializer(RedactedOutput):
    class Meta:
        model = Checkpoint
        fields = CHECKPOINT_FIELDS
        read_only_fields = CHECKPOINT_FIELDS


class CheckpointDetailSerializer(RedactedOutput):
    """One checkpoint in full: the list's fields plus the opaque runtime ``state``."""

    class Meta:
        model = Checkpoint
        fields = [*CHECKPOINT_FIELDS, "state"]
        read_only_fields = fields


class SessionSerializer(RedactedOutput):
    previous_session_key = serializers.CharField(
        source="previous_session.session_key", default=None, read_only=True, allow_null=True
    )
    checkpoint_total = serializers.IntegerField(read_only=True)
    injection_total = serializers.IntegerField(read_only=True)
    live = serializers.BooleanField(source="is_live", read_only=True)

    class Meta:
        model = Session
        fields = [
            "session_key",
            "harness",
            "project",
            "project_normalized",
            "git_root",
            "git_branch",
            "model",
            "live",
            "started_at",
            "last_activity_at",
            "ended_at",
            "end_reason",
            "previous_session_key",
            "prompt_count",
            "compaction_count",
            "checkpoint_total",
            "injection_total",
            "context_tokens",
            "context_window",
            "context_percent",
            "pressure_reminder_count",
            "pressure_reminder_level",
            "pressure_agent_acted",
            "pressure_acted_count",
        ]
        read_only_fields = fields


class CheckpointQuerySerializer(serializers.Serializer[Any]):
    """The filters of ``GET /api/checkpoints/``."""

    project = serializers.CharField(required=False, max_length=1024)
    session = serializers.CharField(required=False, max_length=255)
    harness = serializers.ChoiceField(choices=Harness.choices, required=False)
    trigger = serializers.ChoiceField(choices=Trigger.choices, required=False)
    agent = serializers.CharField(required=False, max_length=255)
    tag = serializers.CharField(required=False, max_length=64)
    before = serializers.DateTimeField(required=False)
    after = serializers.DateTimeField(required=False)
    q = serializers.CharField(required=False, max_length=200)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)


class RecoveryQuerySerializer(serializers.Serializer[Any]):
    """``GET /api/recovery/``: a session, or a project (what a new session there would get)."""

    session = serializers.CharField(required=False, max_length=255)
    project = serializers.CharField(required=False, max_length=1024)
    budget = serializers.IntegerField(required=False, min_value=200, max_value=9999)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("session")) == bool(attrs.get("project")):
            raise serializers.ValidationError("Give exactly one of 'session' or 'project'.")
        return attrs


TEXT_ITEM = 2000
LIST_ITEMS = 50


def _text_list(max_items: int = LIST_ITEMS, max_chars: int = TEXT_ITEM) -> Any:
    return serializers.ListField(
        child=serializers.CharField(max_length=max_chars, allow_blank=False),
        max_length=max_items,
        required=False,
    )


class CheckpointCaptureSerializer(serializers.Serializer[Any]):
    """``POST /api/checkpoints/``: an explicit or agent checkpoint."""

    session_key = serializers.CharField(max_length=255)
    project = serializers.CharField(max_length=1024, required=False, allow_blank=True)
    harness = serializers.ChoiceField(choices=Harness.choices, default=Harness.API)
    trigger = serializers.ChoiceField(
        choices=[Trigger.EXPLICIT.value, Trigger.AGENT.value], default=Trigger.EXPLICIT.value
    )
    digest = serializers.CharField(max_length=100_000, required=False, allow_blank=True)
    # What the session is for: it becomes the session's goal (the later checkpoints keep it).
    goal = serializers.CharField(max_length=TEXT_ITEM, required=False, allow_blank=True)
    current_task = serializers.CharField(max_length=TEXT_ITEM, required=False, allow_blank=True)
    decisions = _text_list()
    open_questions = _text_list()
    blockers = _text_list()
    next_steps = _text_list()
    files = _text_list(max_chars=1024)
    agent_id = serializers.CharField(max_length=255, required=False, allow_blank=True)
    tags = _text_list(max_items=20, max_chars=64)
    state = serializers.JSONField(required=False)

    def validate_session_key(self, value: str) -> str:
        problem = identifier_problem(value.strip())
        if problem:
            raise serializers.ValidationError(f"A session key {problem}")
        return value.strip()

    def validate_state(self, value: Any) -> Any:
        from django.conf import settings

        limit = settings.SIGNET_MAX_STATE_BYTES
        if len(json.dumps(value, ensure_ascii=False).encode()) > limit:
            raise serializers.ValidationError(f"'state' is over {limit} bytes as JSON.")
        return value

    def create(self, validated_data: dict[str, Any]) -> Checkpoint:
        """``serializer.save(owner=…)``: the one write path of explicit and agent checkpoints
        (the API's capture, the MCP ``session_digest``)."""
        fields = validated_data
        return checkpoint_capture(
            owner=fields["owner"],
            session_key=fields["session_key"],
            project=fields.get("project", ""),
            harness=fields["harness"],
            trigger=fields["trigger"],
            content=CheckpointContent(
                narrative=fields.get("digest", ""),
                goal=fields.get("goal", ""),
                current_task=fields.get("current_task", ""),
                decisions=fields.get("decisions", []),
                open_questions=fields.get("open_questions", []),
                blockers=fields.get("blockers", []),
                next_steps=fields.get("next_steps", []),
                modified_files=fields.get("files", []),
                agent_id=fields.get("agent_id", ""),
                tags=fields.get("tags", []),
                state=fields.get("state"),
            ),
        )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        content_fields = (
            "digest",
            "goal",
            "current_task",
            "decisions",
            "open_questions",
            "blockers",
        )
        if not any(attrs.get(name) for name in (*content_fields, "next_steps", "files", "state")):
            raise serializers.ValidationError(
                "Send a digest or at least one structured field (task, decisions, …)."
            )
        return attrs
