"""Retention: the prune (checkpoint age, session age, per-session cap) and the idle-session close.

The prune applies three rules, with cutoffs fixed when the run begins. Each rule leaves out
what an earlier one takes, so they never overlap, and a dry run predicts the real run exactly
(rows written meanwhile aside):

1. ``session_age``: a session whose last activity is older than ``session_retention_days``
   goes, with all its checkpoints and injections.
2. ``age``: a checkpoint older than ``retention_days`` goes, unless it is the most recent of
   its session (that one stays as the session's record).
3. ``cap``: a session over ``max_checkpoints_per_session`` (a cap lowered after it filled)
   loses its oldest checkpoints beyond the cap that rule 2 did not already take.

Rows are selected in keyset order, a bounded batch at a time, and each batch is deleted in
its own short transaction, so memory stays flat and hook writes queue behind one batch at
most. The dry run walks exactly the same rows and only skips the deletes.

The package: ``prune`` (the rules, batches, lease, schedule budget), ``report`` (what a run
removed), ``space`` (SQLite space handed back), ``idle`` (the idle-session close).
"""

from checkpoints.services.retention.idle import IdleReport, sessions_close_idle
from checkpoints.services.retention.prune import (
    BATCH_SIZE,
    PRUNE_LEASE_KEY,
    background_priority,
    prune_preview,
    prune_run,
    prune_scheduled,
    task_seconds,
)
from checkpoints.services.retention.report import RULE_TITLES, PruneReport, Rule, RuleTally
from checkpoints.services.retention.space import database_space_reclaim, sqlite_prepare

__all__ = [
    "BATCH_SIZE",
    "PRUNE_LEASE_KEY",
    "RULE_TITLES",
    "IdleReport",
    "PruneReport",
    "Rule",
    "RuleTally",
    "background_priority",
    "database_space_reclaim",
    "prune_preview",
    "prune_run",
    "prune_scheduled",
    "sessions_close_idle",
    "sqlite_prepare",
    "task_seconds",
]
