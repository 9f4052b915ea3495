"""Harness adapters: each turns its harness's raw hook payload into an ``Event`` and the
engine's ``Outcome`` back into the reply that harness expects. The engine knows no harness.
"""

from __future__ import annotations

from checkpoints.harnesses.base import HarnessAdapter
from checkpoints.harnesses.claude_code import ClaudeCodeAdapter

ADAPTERS: dict[str, HarnessAdapter] = {
    adapter.harness: adapter for adapter in (ClaudeCodeAdapter(),)
}


def adapter_for(harness: str) -> HarnessAdapter | None:
    """The adapter registered for ``harness`` (its URL slug), or None."""
    return ADAPTERS.get(harness)
