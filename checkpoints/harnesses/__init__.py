"""Harness adapters: each turns its harness's raw hook payload into an ``Event`` and the
engine's ``Outcome`` back into the reply that harness expects. The engine knows no harness.
"""

from __future__ import annotations

from checkpoints.harnesses.base import HarnessAdapter
from checkpoints.harnesses.claude_code import ClaudeCodeAdapter
from checkpoints.harnesses.codex import CodexAdapter
from checkpoints.harnesses.gemini import GeminiAdapter
from checkpoints.harnesses.openclaw import OpenClawAdapter
from checkpoints.harnesses.opencode import OpenCodeAdapter

ADAPTERS: dict[str, HarnessAdapter] = {
    adapter.harness: adapter
    for adapter in (
        ClaudeCodeAdapter(),
        OpenClawAdapter(),
        CodexAdapter(),
        GeminiAdapter(),
        OpenCodeAdapter(),
    )
}


def adapter_for(harness: str) -> HarnessAdapter | None:
    """The adapter registered for ``harness`` (its URL slug), or None."""
    return ADAPTERS.get(harness)
