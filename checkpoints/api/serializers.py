"""Output (and query) serializers of the read API. Every text is redacted on the way out."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from checkpoints.models import Checkpoint, Harness, Session, Trigger
from checkpoints.services.redaction import redact_data

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
        source="previous_session.session_key", default=None, read_only=True
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
        ]
        read_only_fields = fields


class CheckpointQuerySerializer(serializers.Serializer[Any]):
    """The filters of ``GET /api/checkpoints/``."""

    project = serializers.CharField(required=False, max_length=1024)
    session = serializers.CharField(required=False, max_length=255)
    harness = serializers.ChoiceField(choices=Harness.choices, required=False)
    trigger = serializers.ChoiceField(choices=Trigger.choices, required=False)
    agent = serializers.CharField(required=False, max_length=255)
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
