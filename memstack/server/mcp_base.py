"""What every MCP tool shares, whichever module defines it: what the server's lifespan
hands a call (:class:`Served`), the ``user_id`` and ``session_id`` parameters (pinning
finds ``user_id`` by name), and memstack's errors as tool errors the model can read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from memstack import AsyncMemory
from memstack.core.errors import MemstackError


@dataclass
class Served:
    """What the lifespan hands every tool call."""

    memory: AsyncMemory
    # Drain pending ingest jobs before a read, so a turn remembered a moment ago is
    # already a fact. Needed on the embedded default, where no worker can see the queue.
    inline_ingest: bool
    drain_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def catch_up(self) -> None:
        if self.inline_ingest:
            async with self.drain_lock:
                await self.memory.drain()


ToolContext = Context[Served, Any]
UserId = Annotated[str, Field(description="Whose memory: a stable id of the end user.")]
SessionId = Annotated[str, Field(description="The conversation; one user owns a session.")]


@contextmanager
def as_tool_errors() -> Iterator[None]:
    # A ToolError's text reaches the model (it can fix a bad id and retry); anything else
    # the SDK hides behind a generic message and logs with its traceback.
    try:
        yield
    except MemstackError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


def lifespan_of(ctx: ToolContext) -> Served:
    """What the lifespan handed the call."""
    return ctx.request_context.lifespan_context
