"""Signet Continuity's data: agent sessions, their checkpoints, injections, config, tokens.

All continuity state lives here, never in a worker's memory: the web server runs several
processes and a deployment may run several hosts, so every counter is a column updated
atomically.
"""

from __future__ import annotations

import hashlib
import itertools
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from checkpoints.ids import uuid7

# Claude Code drops any hook output string over this many characters to a file preview.
HARNESS_CONTEXT_CAP_CHARS = 10_000


class Harness(models.TextChoices):
    CLAUDE_CODE = "claude-code", "Claude Code"
    CODEX = "codex", "Codex CLI"
    GEMINI = "gemini", "Gemini CLI"
    OPENCODE = "opencode", "OpenCode"
    OPENCLAW = "openclaw", "OpenClaw"
    API = "api", "API"


class Trigger(models.TextChoices):
    PERIODIC = "periodic", "Periodic"
    PRE_COMPACTION = "pre_compaction", "Pre-compaction"
    AGENT = "agent", "Agent narrative"
    EXPLICIT = "explicit", "Explicit"
    SESSION_END = "session_end", "Session end"


class GoalSource(models.TextChoices):
    """Where a session's goal came from, the weakest first."""

    PROMPT = "prompt", "Opening request"
    SUMMARY = "summary", "Compaction summary"
    REDIRECT = "redirect", "The user's redirect"
    AGENT = "agent", "Agent or client"


class Scope(models.TextChoices):
    INGEST = "ingest", "Ingest (hooks)"
    READ = "read", "Read"
    WRITE = "write", "Write"


def _empty_list() -> list[Any]:
    return []


class Session(models.Model):
    """One coding-agent session, as its harness names it (``session_key``), per owner."""

    # The end reason the idle-session close writes; any later event of the session reopens it.
    END_REASON_IDLE = "idle"
    # Not a column: True on a row not yet in the database (``sessions.session_new``) or just
    # inserted by ``session_lock``, until a checkpoint of it is written. Recovery then knows
    # it has none of its own to look for.
    created_now = False

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions"
    )
    session_key = models.CharField(max_length=255)
    harness = models.CharField(max_length=32, choices=Harness.choices)
    project = models.CharField(max_length=1024, blank=True)
    project_normalized = models.CharField(max_length=1024, blank=True)
    git_root = models.CharField(max_length=1024, blank=True)
    previous_session = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="continuations",
        help_text="The session this one continues (handoff lineage).",
    )
    started_at = models.DateTimeField(default=timezone.now)
    last_activity_at = models.DateTimeField(
        default=timezone.now,
        help_text="The session's last event, to the minute (services/sessions.py: ACTIVITY_GRAIN).",
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=128, blank=True)
    git_branch = models.CharField(max_length=255, blank=True)
    git_head = models.CharField(max_length=64, blank=True)
    transcript_path = models.CharField(max_length=4096, blank=True)

    prompt_count = models.PositiveIntegerField(default=0)
    recent_queries = models.JSONField(default=_empty_list, blank=True)
    recent_prompts = models.JSONField(default=_empty_list, blank=True)
    recent_remembers = models.JSONField(default=_empty_list, blank=True)
    modified_files = models.JSONField(default=_empty_list, blank=True)

    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_prompt = models.PositiveIntegerField(default=0)
    checkpoint_pending_since = models.DateTimeField(null=True, blank=True)

    compaction_count = models.PositiveIntegerField(default=0)
    # The current compaction cycle: PreCompact, SessionStart(compact) and PostCompact of one
    # compaction, in whatever order they come (see ``engine.handlers._compaction_mark``).
    compaction_started_at = models.DateTimeField(null=True, blank=True)
    compaction_events = models.PositiveSmallIntegerField(default=0)
    compaction_recovered = models.BooleanField(default=False)
    compact_summary = models.TextField(blank=True)
    # The prompt count when the summary came (None: not known, an older one read from the
    # transcript). Its current work and next steps hold only until the next prompt.
    summary_prompt = models.PositiveIntegerField(null=True, blank=True)
    last_assistant_message = models.TextField(blank=True)
    # The agent's own task list, as its client last read it (``signet.tasks``): the task in
    # progress and the pending ones; a checkpoint that brings none of its own takes these.
    current_task = models.TextField(blank=True)
    next_steps = models.JSONField(default=_empty_list, blank=True)
    # The next steps the latest agent or explicit checkpoint that named any gave; they stand
    # until another names its own. Checkpoints hold them merged with the task list's, the
    # newer first: ``agent_steps_newer`` says whether they came after the list last changed.
    agent_next_steps = models.JSONField(default=_empty_list, blank=True)
    agent_steps_newer = models.BooleanField(default=False)
    # What the session is for: its opening substantive request, replaced when the user
    # redirects it, or the goal the agent or the harness's compaction summary stated.
    goal = models.TextField(blank=True)
    # Where the goal came from (``GoalSource``): a later source replaces an earlier one by
    # the precedence ``engine.handlers`` documents.
    goal_source = models.CharField(max_length=16, blank=True, choices=GoalSource.choices)
    # Rules and choices the user stated in prompts ("use X, not Y", "don't …"), newest last.
    decisions = models.JSONField(default=_empty_list, blank=True)
    # Set when the agent lost its context (compaction) or its first prompt came without a
    # SessionStart; the next event that can inject hands it the recovery context.
    recovery_due = models.BooleanField(default=False)
    # Prompts, edits or notes arrived since the last checkpoint: only then is one worth
    # writing (an idle session must not bury a good checkpoint under an empty one).
    changed_since_checkpoint = models.BooleanField(default=False)
    # Context usage as the client last reported it (``signet.usage``), against the window of
    # the session's model; unknown again once the session compacts.
    context_tokens = models.PositiveIntegerField(null=True, blank=True)
    context_percent = models.FloatField(null=True, blank=True)
    context_window = models.PositiveIntegerField(null=True, blank=True)
    # Per compaction cycle (cleared when the next one opens): bit i set once the i-th
    # pressure threshold (notice, warning, critical) was reminded of, or the i-th token
    # checkpoint threshold marked its checkpoint.
    pressure_reminders_sent = models.PositiveSmallIntegerField(default=0)
    token_checkpoints_marked = models.PositiveSmallIntegerField(default=0)
    # The latest reminder, and whether an agent checkpoint followed it within
    # ``pressure_acted_turns`` prompts (None: no reminder yet, or still within them).
    pressure_reminder_level = models.CharField(max_length=16, blank=True)
    pressure_reminder_prompt = models.PositiveIntegerField(null=True, blank=True)
    pressure_agent_acted = models.BooleanField(null=True, blank=True)
    pressure_reminder_count = models.PositiveIntegerField(default=0)
    pressure_acted_count = models.PositiveIntegerField(default=0)
    ignored_event_count = models.PositiveIntegerField(default=0)
    # The prompts and compactions applied last, each as ``[digest of its delivery key, Unix
    # time it happened]`` (``engine/backlog.py``): what the harness posted itself and what a
    # client later found in the transcript are then applied once, and in order.
    delivered_keys = models.JSONField(default=_empty_list, blank=True, editable=False)
    # Raised by every write of the row (``save`` below): the prompt hot path reads the row
    # without a lock and writes it back only if this is unchanged (``sessions.session_swap``).
    row_version = models.PositiveBigIntegerField(default=0, editable=False)

    class Meta:
        verbose_name = "agent session"
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "session_key"], name="session_key_unique_per_owner"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="session_ends_after_start",
            ),
        ]
        indexes = [
            models.Index(
                fields=["owner", "project_normalized", "-last_activity_at"],
                name="session_owner_project_recent",
            ),
            models.Index(fields=["owner", "-last_activity_at"], name="session_owner_recent"),
            # A session that arrives with only its cwd joins the known git top-level above it
            # (``projects.project_known``): without it, a scan of all the owner's sessions.
            models.Index(fields=["owner", "git_root"], name="session_owner_git_root"),
            # The sessions whose periodic checkpoint is pending, oldest mark first: what the
            # sweep and each flush task look for (``pending.checkpoints_flush_due``). Only
            # the few pending rows are in it, so a prompt that leaves the mark alone never
            # touches it.
            models.Index(
                fields=["checkpoint_pending_since"],
                condition=Q(checkpoint_pending_since__isnull=False),
                name="session_pending_since",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.harness}:{self.session_key}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, raising ``row_version`` in the database, so that a hot-path write that read
        the row before this one finds it changed and starts over.

        The new version is counted by the database (``row_version + 1``), not here: a row
        loaded long ago cannot hand out a version that is in use. The attribute is left
        unloaded afterwards; reading it loads the stored value.
        """
        update_fields = kwargs.get("update_fields")
        if self._state.adding or (update_fields is not None and not update_fields):
            super().save(*args, **kwargs)  # an insert, or nothing to write
            return
        self.row_version = F("row_version") + 1
        if update_fields is not None:
            kwargs["update_fields"] = {*update_fields, "row_version"}
        try:
            super().save(*args, **kwargs)
        finally:
            self.__dict__.pop("row_version", None)

    @property
    def is_live(self) -> bool:
        return self.ended_at is None


class Checkpoint(models.Model):
    """A structured snapshot of a session's working state, from which recovery is built."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="checkpoints"
    )
    # Indexed with its recency below (``checkpoint_session_latest``), not on its own.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="checkpoints", db_index=False
    )
    # Denormalised from the session for the two indexed look-ups (by session, by project).
    session_key = models.CharField(max_length=255)
    project_normalized = models.CharField(max_length=1024, blank=True)
    harness = models.CharField(max_length=32, choices=Harness.choices)
    trigger = models.CharField(max_length=32, choices=Trigger.choices)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )

    digest = models.TextField(blank=True)
    goal = models.TextField(blank=True)  # what the session is for (``Session.goal``)
    current_task = models.TextField(blank=True)
    decisions = models.JSONField(default=_empty_list, blank=True)
    open_questions = models.JSONField(default=_empty_list, blank=True)
    blockers = models.JSONField(default=_empty_list, blank=True)
    next_steps = models.JSONField(default=_empty_list, blank=True)
    modified_files = models.JSONField(default=_empty_list, blank=True)
    recent_prompts = models.JSONField(default=_empty_list, blank=True)
    memory_queries = models.JSONField(default=_empty_list, blank=True)
    recent_remembers = models.JSONField(default=_empty_list, blank=True)
    last_assistant_message = models.TextField(blank=True)
    git_branch = models.CharField(max_length=255, blank=True)
    git_head = models.CharField(max_length=64, blank=True)
    context_tokens = models.PositiveIntegerField(null=True, blank=True)
    prompt_count = models.PositiveIntegerField(default=0)
    # Prompts since the session's previous checkpoint: what the activity page adds up per day.
    new_prompts = models.PositiveIntegerField(default=0)
    agent_id = models.CharField(max_length=255, blank=True)
    tags = models.JSONField(default=_empty_list, blank=True)
    state = models.JSONField(null=True, blank=True, help_text="Opaque runtime state, bounded.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        get_latest_by = "created_at"
        constraints = [
            models.CheckConstraint(
                condition=Q(trigger__in=Trigger.values), name="checkpoint_trigger_valid"
            ),
        ]
        indexes = [
            # A session's newest first: the parent look-up, the cap, and the prune's
            # "is there a newer one" test all walk this.
            models.Index(
                fields=["session", "-created_at", "-id"], name="checkpoint_session_latest"
            ),
            # Recovery's two look-ups, newest first, and every owner's list filtered by
            # session or project: the owner comes first, or SQLite (which keeps no statistics)
            # prefers the activity index below and sorts all of the owner's checkpoints.
            models.Index(
                fields=["owner", "session_key", "-created_at", "-id"],
                name="checkpoint_session_recent",
            ),
            models.Index(
                fields=["owner", "project_normalized", "-created_at", "-id"],
                name="checkpoint_project_recent",
            ),
            # The activity page's range scan, answered from the index alone.
            models.Index(
                fields=["owner", "created_at", "trigger", "new_prompts"],
                name="checkpoint_owner_activity",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.trigger} checkpoint of {self.session_key} at {self.created_at:%Y-%m-%d %H:%M}"
        )


class Injection(models.Model):
    """A recovery context handed to a session: the audit of what the agent was told."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="injections")
    checkpoint = models.ForeignKey(
        Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="injections"
    )
    source = models.CharField(
        max_length=32, help_text="What asked for it: startup, resume, compact, api…"
    )
    match = models.CharField(
        max_length=32, blank=True, help_text="How the checkpoint was found: session, lineage…"
    )
    content = models.TextField()
    size_chars = models.PositiveIntegerField()
    omitted = models.JSONField(default=_empty_list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["session", "-created_at"], name="injection_session_recent")]

    def __str__(self) -> str:
        return f"{self.size_chars} chars into {self.session} ({self.source})"


PRESSURE_TEXT_MAX_CHARS = 1000
PRESSURE_NOTICE_TEXT = (
    "Context note: this session has used about {percent}% of its context window. "
    "When you reach a natural stopping point, consider saving your progress with the "
    "session_digest tool."
)
PRESSURE_WARNING_TEXT = (
    "Context warning: about {percent}% of the context window is used. Save your progress "
    "soon with the session_digest tool (task, decisions, open questions, next steps), so "
    "that nothing is lost when the context is compacted."
)
PRESSURE_CRITICAL_TEXT = (
    "Context critical: about {percent}% of the context window is used and compaction is "
    "imminent. Call session_digest now with your current task, decisions, open questions "
    "and next steps, before doing anything else."
)
# Bit masks of per-cycle thresholds live in a small integer column.
MAX_TOKEN_CHECKPOINTS = 8


def percent_list(value: str) -> list[int]:
    """The percentages of a ``"25, 50, 75"`` setting; ValueError unless they rise in 1-100."""
    items = [part.strip() for part in value.split(",") if part.strip()]
    if not all(item.isdigit() for item in items):
        raise ValueError("Use whole percentages separated by commas, e.g. 25, 50, 75.")
    numbers = [int(item) for item in items]
    if len(numbers) > MAX_TOKEN_CHECKPOINTS:
        raise ValueError(f"At most {MAX_TOKEN_CHECKPOINTS} percentages.")
    if any(not 1 <= number <= 100 for number in numbers):
        raise ValueError("Each percentage must be between 1 and 100.")
    if any(low >= high for low, high in itertools.pairwise(numbers)):
        raise ValueError("The percentages must rise.")
    return numbers


def validate_percent_list(value: str) -> None:
    try:
        percent_list(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class ContinuityConfig(models.Model):
    """The one row of checkpoint and recovery policy, edited in the admin.

    Read on every decision through ``checkpoints.services.config.config_get`` (shared cache,
    evicted on save), so a change applies to the next request of every worker.
    """

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID, editable=False)
    enabled = models.BooleanField(default=True, help_text="Off: hooks are accepted, nothing kept.")
    prompt_interval = models.PositiveIntegerField(
        default=10,
        validators=[MinValueValidator(1)],
        help_text="A periodic checkpoint is due after this many prompts…",
    )
    time_interval_minutes = models.PositiveIntegerField(
        default=15,
        validators=[MinValueValidator(1)],
        help_text="…or after this many minutes, whichever comes first.",
    )
    max_checkpoints_per_session = models.PositiveIntegerField(
        default=50,
        validators=[MinValueValidator(1)],
        help_text="A session keeps at most this many checkpoints: each write drops its oldest "
        "beyond it, and the prune trims sessions that went over before this was lowered.",
    )
    retention_days = models.PositiveIntegerField(
        default=7,
        validators=[MinValueValidator(1)],
        help_text="The prune deletes checkpoints older than this many days, except each "
        "session's most recent one, which stays as the session's record. Hook idempotency "
        "keys are forgotten after the same time.",
    )
    session_retention_days = models.PositiveIntegerField(
        default=90,
        validators=[MinValueValidator(1)],
        help_text="The prune deletes a session whose last activity is older than this many "
        "days, with all its checkpoints and injections. At least the checkpoint retention.",
    )
    idle_session_minutes = models.PositiveIntegerField(
        default=240,
        validators=[MinValueValidator(1)],
        help_text="A live session with no event for this many minutes is ended (reason "
        "'idle'): its pending checkpoint is written first, and a final one if anything "
        "changed. Checked every few minutes.",
    )
    prune_interval_minutes = models.PositiveIntegerField(
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(7 * 24 * 60)],
        help_text="How often the prune runs. Saving this page re-registers the schedule.",
    )
    recovery_budget_chars = models.PositiveIntegerField(
        default=2000,
        validators=[MinValueValidator(200), MaxValueValidator(HARNESS_CONTEXT_CAP_CHARS - 1)],
        help_text="Reserved for the Session Recovery Context inside the inject budget.",
    )
    inject_budget_chars = models.PositiveIntegerField(
        default=9000,
        validators=[MinValueValidator(200), MaxValueValidator(HARNESS_CONTEXT_CAP_CHARS - 1)],
        help_text=f"Everything injected at once; below the harness cap of "
        f"{HARNESS_CONTEXT_CAP_CHARS:,} characters.",
    )
    recovery_window_minutes = models.PositiveIntegerField(
        default=240,
        validators=[MinValueValidator(1)],
        help_text="A new session recovers its project's latest checkpoint if this recent.",
    )
    debounce_seconds = models.FloatField(
        default=2.5, validators=[MinValueValidator(0.0), MaxValueValidator(3600.0)]
    )
    pressure_notice_percent = models.PositiveSmallIntegerField(
        default=50, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    pressure_warning_percent = models.PositiveSmallIntegerField(
        default=75, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    pressure_critical_percent = models.PositiveSmallIntegerField(
        default=90, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    pressure_notice_text = models.TextField(
        max_length=PRESSURE_TEXT_MAX_CHARS,
        default=PRESSURE_NOTICE_TEXT,
        help_text="Injected once per compaction cycle at the notice threshold. "
        "{percent}, {tokens} and {window} are replaced.",
    )
    pressure_warning_text = models.TextField(
        max_length=PRESSURE_TEXT_MAX_CHARS,
        default=PRESSURE_WARNING_TEXT,
        help_text="Injected once per compaction cycle at the warning threshold.",
    )
    pressure_critical_text = models.TextField(
        max_length=PRESSURE_TEXT_MAX_CHARS,
        default=PRESSURE_CRITICAL_TEXT,
        help_text="Injected once per compaction cycle at the critical threshold.",
    )
    pressure_acted_turns = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="An agent checkpoint within this many prompts of a reminder counts as the "
        "agent acting on it (recorded only; nothing is forced).",
    )
    token_checkpoint_percents = models.CharField(
        max_length=64,
        default="25, 50, 75",
        blank=True,
        validators=[validate_percent_list],
        help_text="A periodic checkpoint is marked when the context reaches each of these "
        "percentages of the window, once per compaction cycle (empty: never).",
    )
    context_window_default = models.PositiveIntegerField(
        default=200_000,
        validators=[MinValueValidator(1000)],
        help_text="Context window (tokens) of a model, unless the one below applies.",
    )
    context_window_1m = models.PositiveIntegerField(
        default=1_000_000,
        validators=[MinValueValidator(1000)],
        help_text="Context window of a model its harness runs with the long window (Claude "
        "Code: a [1m] model, or one with a native 1M window), or of a session that reported "
        "more tokens than the default window holds.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "continuity settings"
        verbose_name_plural = "continuity settings"
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="config_singleton"),
            models.CheckConstraint(
                condition=Q(prompt_interval__gte=1)
                & Q(time_interval_minutes__gte=1)
                & Q(max_checkpoints_per_session__gte=1)
                & Q(retention_days__gte=1)
                & Q(idle_session_minutes__gte=1)
                & Q(prune_interval_minutes__gte=1)
                & Q(prune_interval_minutes__lte=7 * 24 * 60)
                & Q(recovery_window_minutes__gte=1)
                & Q(debounce_seconds__gte=0),
                name="config_intervals_positive",
            ),
            models.CheckConstraint(
                condition=Q(inject_budget_chars__lt=HARNESS_CONTEXT_CAP_CHARS)
                & Q(recovery_budget_chars__lte=F("inject_budget_chars")),
                name="config_budgets_within_cap",
            ),
            models.CheckConstraint(
                condition=Q(pressure_notice_percent__lt=F("pressure_warning_percent"))
                & Q(pressure_warning_percent__lt=F("pressure_critical_percent"))
                & Q(pressure_critical_percent__lte=100),
                name="config_pressure_ascending",
            ),
            models.CheckConstraint(
                condition=Q(session_retention_days__gte=F("retention_days")),
                name="config_session_retention_covers_checkpoints",
            ),
        ]

    def __str__(self) -> str:
        return "Continuity settings"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.recovery_budget_chars > self.inject_budget_chars:
            errors["recovery_budget_chars"] = (
                "The recovery budget is reserved inside the inject budget; it cannot exceed it."
            )
        if not (
            self.pressure_notice_percent
            < self.pressure_warning_percent
            < self.pressure_critical_percent
        ):
            errors["pressure_warning_percent"] = (
                "Pressure thresholds must rise: notice < warning < critical."
            )
        if self.session_retention_days < self.retention_days:
            errors["session_retention_days"] = (
                "Sessions must be kept at least as long as checkpoints "
                f"({self.retention_days} days): a session's deletion takes its checkpoints."
            )
        if errors:
            raise ValidationError(errors)

    @property
    def token_checkpoint_thresholds(self) -> list[int]:
        """``token_checkpoint_percents`` as numbers (none if the row holds a bad value)."""
        try:
            return percent_list(self.token_checkpoint_percents)
        except ValueError:
            return []

    @property
    def time_interval(self) -> timedelta:
        return timedelta(minutes=self.time_interval_minutes)

    @property
    def recovery_window(self) -> timedelta:
        return timedelta(minutes=self.recovery_window_minutes)

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.retention_days)

    @property
    def session_retention(self) -> timedelta:
        return timedelta(days=self.session_retention_days)

    @property
    def idle_session(self) -> timedelta:
        return timedelta(minutes=self.idle_session_minutes)


class RetentionRun(models.Model):
    """One run of the prune or of the idle-session close: when, how long, what it removed."""

    class Kind(models.TextChoices):
        PRUNE = "prune", "Prune"
        IDLE_CLOSE = "idle_close", "Idle-session close"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    started_at = models.DateTimeField(default=timezone.now)
    duration_seconds = models.FloatField(default=0.0)
    checkpoints_by_age = models.PositiveIntegerField(default=0)
    checkpoints_by_cap = models.PositiveIntegerField(default=0)
    checkpoints_by_session_age = models.PositiveIntegerField(default=0)
    sessions_deleted = models.PositiveIntegerField(default=0)
    injections_deleted = models.PositiveIntegerField(default=0)
    hook_deliveries_deleted = models.PositiveIntegerField(default=0)
    sessions_closed = models.PositiveIntegerField(default=0)
    bytes_reclaimed = models.BigIntegerField(
        null=True, blank=True, help_text="Database space returned afterwards (SQLite)."
    )
    report = models.JSONField(
        default=dict, blank=True, help_text="Per rule: counts by project, oldest and newest."
    )

    class Meta:
        ordering = ["-started_at"]
        get_latest_by = "started_at"
        indexes = [models.Index(fields=["kind", "-started_at"], name="retention_run_recent")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} at {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def checkpoints_deleted(self) -> int:
        return self.checkpoints_by_age + self.checkpoints_by_cap + self.checkpoints_by_session_age


class HookDelivery(models.Model):
    """An idempotency key a client has delivered: a replayed event is recognised, not recounted."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="hook_deliveries"
    )
    key = models.CharField(max_length=100)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="hook_delivery_unique_key")
        ]
        indexes = [models.Index(fields=["created_at"], name="hook_delivery_created")]

    def __str__(self) -> str:
        return self.key


class ThrottleCounter(models.Model):
    """Requests one throttle bucket (a token's scope, an address) made in one fixed window.

    Written only by ``services.throttling`` with a single upsert, so concurrent workers
    never lose a count; rows of closed windows are deleted by the every-minute sweep. Used
    with PostgreSQL without Redis; SQLite counts in a file (``services.host_counters``) and
    comes here only for a bucket the file has no room for.
    """

    bucket = models.CharField(max_length=150)
    window_end = models.BigIntegerField(help_text="Unix time at which the window closes.")
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["bucket", "window_end"], name="throttle_counter_bucket_window"
            )
        ]
        indexes = [models.Index(fields=["window_end"], name="throttle_counter_window_end")]

    def __str__(self) -> str:
        return f"{self.bucket} until {self.window_end}: {self.count}"


def hash_token(raw: str) -> str:
    """SHA-256 of a raw token. Tokens carry 256 random bits, so a slow KDF buys nothing."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for the API and the hooks. Only its hash and a prefix are stored."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=_empty_list)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def has_scope(self, scope: str) -> bool:
        return self.is_active and scope in self.scopes

    def clean(self) -> None:
        unknown = sorted(set(self.scopes) - set(Scope.values))
        if not self.scopes or unknown:
            raise ValidationError(
                {"scopes": f"Choose one or more of {', '.join(Scope.values)}; unknown: {unknown}"}
            )
