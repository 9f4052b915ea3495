"""Context pressure: how full a session's context is, the reminders and token checkpoints
that earns, and whether the agent acted on a reminder.

The client reports its context usage (``signet.usage``, sent by the Claude Code hook client
at Stop); the percentage is taken against the window of the session's model. The next
prompt past a pressure threshold carries a reminder, and each token-checkpoint threshold
marks a periodic checkpoint pending, each once per compaction cycle: the cycle's masks are
cleared when the next compaction opens (``engine.handlers._compaction_mark``).

Everything here changes the locked session row in memory; the caller saves it. No query.
"""

from __future__ import annotations

from checkpoints.harnesses.base import ContextUsage
from checkpoints.models import ContinuityConfig, Session

LEVELS = ("notice", "warning", "critical")
# Below this much room in the inject budget a reminder waits for the next prompt.
MIN_REMINDER_CHARS = 80


def context_window_for(
    *, config: ContinuityConfig, session: Session, tokens: int, long_context: bool = False
) -> int:
    """The window the session's tokens are counted against.

    The long window when the harness's adapter says the model has it (``long_context``),
    when the session has reported more tokens than the default window holds (which proves
    it), or when it was found long before (a later event may name the model less exactly,
    and after a compaction the tokens are few again).
    """
    long_window = config.context_window_1m
    if (
        long_context
        or tokens > config.context_window_default
        or session.context_window == long_window
    ):
        return long_window
    return config.context_window_default


def pressure_window_long(*, session: Session, config: ContinuityConfig) -> None:
    """The harness says the session's model has the long window (its adapter's rule): count
    against it from now on."""
    session.context_window = config.context_window_1m
    if session.context_tokens is not None:
        session.context_percent = round(
            100.0 * session.context_tokens / config.context_window_1m, 1
        )


def pressure_usage_record(
    *, session: Session, usage: ContextUsage, config: ContinuityConfig
) -> bool:
    """Record the client's usage on the session; True when it reached a token-checkpoint
    threshold not yet reached in this compaction cycle (the caller marks the checkpoint)."""
    # A transcript may name the model less exactly than the session's start did (without
    # the mark of its window): a name that told the long window is kept.
    named_long = bool(session.model) and session.context_window == config.context_window_1m
    if usage.model and (usage.long_context or not named_long):
        session.model = usage.model[:128]
    window = context_window_for(
        config=config,
        session=session,
        tokens=usage.context_tokens,
        long_context=usage.long_context,
    )
    session.context_tokens = usage.context_tokens
    session.context_window = window
    session.context_percent = round(100.0 * usage.context_tokens / window, 1)
    reached = _reached(session.context_percent, config.token_checkpoint_thresholds)
    new = reached & ~session.token_checkpoints_marked
    session.token_checkpoints_marked |= reached
    return bool(new)


def pressure_reset(*, session: Session) -> None:
    """A compaction opened a new cycle: the context was rebuilt, its size is unknown again,
    and every threshold may fire once more."""
    session.context_tokens = None
    session.context_percent = None
    session.pressure_reminders_sent = 0
    session.token_checkpoints_marked = 0


def pressure_reminder(*, session: Session, config: ContinuityConfig, room: int) -> str:
    """The reminder this prompt carries ('' for none), recorded on the session.

    Only the highest threshold reached is reminded of: a context that jumped past two of
    them gets one reminder, and the lower one is not sent afterwards. A reminder that does
    not fit in ``room`` characters waits for the next prompt.
    """
    percent = session.context_percent
    if percent is None:
        return ""
    thresholds = [
        config.pressure_notice_percent,
        config.pressure_warning_percent,
        config.pressure_critical_percent,
    ]
    reached = _reached(percent, thresholds)
    if not reached:
        return ""
    top = reached.bit_length() - 1
    if session.pressure_reminders_sent & (1 << top):
        return ""
    template = (
        config.pressure_notice_text,
        config.pressure_warning_text,
        config.pressure_critical_text,
    )[top]
    text = (
        template.replace("{percent}", f"{percent:.0f}")
        .replace("{tokens}", f"{session.context_tokens or 0:,}")
        .replace("{window}", f"{session.context_window or 0:,}")
        .strip()
    )
    if not text or room < min(len(text), MIN_REMINDER_CHARS):
        return ""
    if len(text) > room:
        text = text[: room - 1].rstrip() + "…"
    session.pressure_reminders_sent |= reached
    session.pressure_reminder_level = LEVELS[top]
    session.pressure_reminder_prompt = session.prompt_count
    session.pressure_agent_acted = None
    session.pressure_reminder_count += 1
    return text


def pressure_acted_expire(*, session: Session, config: ContinuityConfig) -> None:
    """At a prompt: a reminder whose turns have all passed without an agent checkpoint is
    recorded as not acted on."""
    reminded = session.pressure_reminder_prompt
    if (
        reminded is not None
        and session.pressure_agent_acted is None
        and session.prompt_count - reminded >= config.pressure_acted_turns
    ):
        session.pressure_agent_acted = False


def pressure_agent_checkpointed(*, session: Session, config: ContinuityConfig) -> None:
    """An agent checkpoint was written: within the latest reminder's turns, it acted on it."""
    reminded = session.pressure_reminder_prompt
    if (
        reminded is not None
        and session.pressure_agent_acted is None
        and session.prompt_count - reminded < config.pressure_acted_turns
    ):
        session.pressure_agent_acted = True
        session.pressure_acted_count += 1


def _reached(percent: float | None, thresholds: list[int]) -> int:
    """The mask of the thresholds ``percent`` has reached."""
    if percent is None:
        return 0
    mask = 0
    for index, threshold in enumerate(thresholds):
        if percent >= threshold:
            mask |= 1 << index
    return mask
