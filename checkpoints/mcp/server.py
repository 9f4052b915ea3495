"""The MCP server: three tools over ``checkpoints.mcp.tools``, for either transport.

``mcp_server_get`` builds one ``MCPServer`` per process; who calls it comes from a context
variable (``principal_bind``), set by the stdio command once and by the HTTP view for each
request. The tools are async, and each runs its Django work through ``sync_to_async``
(thread-sensitive): under the HTTP view's ``async_to_sync`` that is the request's own thread
and database connection; under stdio, asgiref's one thread for sync code.

Each result carries its data twice, as the protocol suggests: ``structured_content`` for a
program, and text for a model (Markdown for the recovery context, JSON for the rest).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from checkpoints.api.serializers import LIST_ITEMS, MAX_PAGE, TEXT_ITEM
from checkpoints.harnesses.base import IDENTIFIER_RULE
from checkpoints.mcp import tools
from checkpoints.mcp.principal import (
    McpPrincipal,
    PrincipalRevoked,
    principal_current,
    principal_refresh,
    recycle_connections,
)

SERVER_NAME = "signet"
INSTRUCTIONS = (
    "Signet keeps checkpoints of this coding session so the work survives compaction and "
    "restarts. Call session_digest after a decision, at a milestone, or when asked to "
    "remember something; call session_recall after a compaction or when a Session Recovery "
    "Context says something was omitted; checkpoints_list finds older checkpoints."
)


def _in_django(
    function: Callable[..., dict[str, Any]],
    principal: McpPrincipal,
    arguments: dict[str, Any],
    recycle: bool,
) -> dict[str, Any]:
    if recycle:
        close_old_connections()
    try:
        try:
            principal = principal_refresh(principal)
        except PrincipalRevoked as exc:
            raise ToolError(str(exc)) from None
        return function(principal=principal, **arguments)
    finally:
        if recycle:
            close_old_connections()


async def _run(function: Callable[..., dict[str, Any]], **arguments: Any) -> dict[str, Any]:
    try:
        principal = principal_current.get()
    except LookupError:  # a server driven without a principal: nobody to act for
        raise ToolError("No authenticated caller.") from None
    recycle = recycle_connections.get()
    return await sync_to_async(_in_django, thread_sensitive=True)(
        function, principal, arguments, recycle
    )


def _result(data: dict[str, Any], text: str | None = None) -> CallToolResult:
    body = text if text is not None else json.dumps(data, ensure_ascii=False, indent=2)
    return CallToolResult(content=[TextContent(type="text", text=body)], structured_content=data)


SessionKey = Annotated[
    str,
    Field(
        description=(
            "The session this call is about. Leave empty for the current session, which the "
            "server knows from its environment or from your working directory. "
            f"A key is {IDENTIFIER_RULE}."
        ),
        max_length=255,
    ),
]
TextItems = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=TEXT_ITEM)]],
    Field(max_length=LIST_ITEMS),
]


async def session_digest(
    summary: Annotated[
        str,
        Field(
            description=(
                "The narrative of the work so far, in Markdown: what you are doing and why, "
                "what was decided and on what grounds, what is still open. It must stand "
                "alone: only the latest checkpoint is recalled after a compaction."
            ),
            min_length=1,
            max_length=100_000,
        ),
    ],
    goal: Annotated[
        str,
        Field(
            description=(
                "What the whole session is for, in one or two sentences, when it differs "
                "from the user's opening request or the user redirected the work. It stays "
                "the session's goal until another digest names one."
            ),
            max_length=TEXT_ITEM,
        ),
    ] = "",
    current_task: Annotated[
        str,
        Field(description="The task in progress, in one or two sentences.", max_length=TEXT_ITEM),
    ] = "",
    decisions: Annotated[
        TextItems, Field(description="Decisions taken, each with its reason.")
    ] = [],  # noqa: B006 (pydantic copies defaults; the schema needs a list here)
    open_questions: Annotated[
        TextItems, Field(description="Questions still open, for you or the user.")
    ] = [],  # noqa: B006
    blockers: Annotated[TextItems, Field(description="What stops progress now.")] = [],  # noqa: B006
    next_steps: Annotated[TextItems, Field(description="The next steps, in order.")] = [],  # noqa: B006
    files: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=1024)]],
        Field(description="Paths of the files that matter to the task.", max_length=LIST_ITEMS),
    ] = [],  # noqa: B006
    session_key: SessionKey = "",
) -> CallToolResult:
    """Save a checkpoint of this session written by you, the agent: the narrative of the work
    and its structured parts. The hooks already record prompts and edited files; this keeps
    what only you know: why. Secrets are redacted before anything is stored."""
    data = await _run(
        tools.digest_write,
        summary=summary,
        session_key=session_key,
        goal=goal,
        current_task=current_task,
        decisions=decisions,
        open_questions=open_questions,
        blockers=blockers,
        next_steps=next_steps,
        files=files,
    )
    return _result(data)


async def session_recall(
    session_key: SessionKey = "",
    project: Annotated[
        str,
        Field(
            description=(
                "Recall the latest checkpoint of this project (its folder or git root) "
                "instead of a session's."
            ),
            max_length=1024,
        ),
    ] = "",
    budget: Annotated[
        int | None,
        Field(description="Characters the recovery context may take.", ge=200, le=9999),
    ] = None,
) -> CallToolResult:
    """Recall where the work stands: the latest checkpoint of this session in full (or of its
    predecessor or project when it has none yet) and the Session Recovery Context as it would
    be injected now. Call it after a compaction, or when a recovery context says something was
    omitted."""
    data = await _run(tools.recall_prepare, session_key=session_key, project=project, budget=budget)
    if data["checkpoint"] is None:
        return _result(data, "No checkpoint to recall yet.")
    full = json.dumps(data["checkpoint"], ensure_ascii=False, indent=2)
    text = f"{data['context']}\n\n## Latest checkpoint in full\n\n```json\n{full}\n```"
    return _result(data, text)


async def checkpoints_list(
    session_key: SessionKey = "",
    project: Annotated[
        str,
        Field(
            description="List this project's checkpoints (its folder or git root).", max_length=1024
        ),
    ] = "",
    limit: Annotated[int, Field(description="How many, newest first.", ge=1, le=MAX_PAGE)] = (
        tools.DEFAULT_LIST_LIMIT
    ),
) -> CallToolResult:
    """List recent checkpoints, newest first, with their ids and a one-line summary: of this
    session's project by default, of one session with ``session_key``, or of ``project``."""
    data = await _run(
        tools.checkpoint_briefs, session_key=session_key, project=project, limit=limit
    )
    return _result(data)


@cache
def mcp_server_get() -> MCPServer:
    """The process's MCP server with Signet's three tools (built on first use)."""
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")
    server.add_tool(
        session_digest,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
        structured_output=False,
    )
    for function in (session_recall, checkpoints_list):
        server.add_tool(
            function,
            annotations=ToolAnnotations(read_only_hint=True),
            structured_output=False,
        )
    return server
