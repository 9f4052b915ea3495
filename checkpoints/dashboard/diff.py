"""What changed between two consecutive checkpoints of a session."""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpoints.models import Checkpoint

# The list fields a reader follows from one checkpoint to the next, with their titles.
DIFFED_LISTS = (
    ("decisions", "Decisions"),
    ("next_steps", "Next steps"),
    ("modified_files", "Files"),
    ("open_questions", "Open questions"),
    ("blockers", "Blockers"),
)


@dataclass(frozen=True)
class ListChange:
    title: str
    added: list[str]
    removed: list[str]


@dataclass(frozen=True)
class CheckpointDiff:
    """The task before and after (when it changed), and each list's added and removed items."""

    task_before: str | None = None
    task_after: str | None = None
    lists: list[ListChange] = field(default_factory=list)
    prompts: int = 0  # prompts between the two checkpoints

    @property
    def task_changed(self) -> bool:
        return self.task_before is not None

    @property
    def empty(self) -> bool:
        return not self.task_changed and not self.lists


def checkpoint_diff(*, before: Checkpoint | None, after: Checkpoint) -> CheckpointDiff:
    """How ``after`` differs from ``before`` (the session's previous checkpoint, if any).

    The first checkpoint of a session is all additions. List items compare as exact strings,
    in their order in ``after``.
    """
    lists = []
    for name, title in DIFFED_LISTS:
        old: list[str] = list(getattr(before, name)) if before is not None else []
        new: list[str] = list(getattr(after, name))
        old_set, new_set = set(old), set(new)
        added = [item for item in new if item not in old_set]
        removed = [item for item in old if item not in new_set]
        if added or removed:
            lists.append(ListChange(title=title, added=added, removed=removed))
    old_task = before.current_task if before is not None else ""
    task_changed = old_task != after.current_task
    return CheckpointDiff(
        task_before=old_task if task_changed else None,
        task_after=after.current_task if task_changed else None,
        lists=lists,
        prompts=max(0, after.prompt_count - (before.prompt_count if before else 0)),
    )
