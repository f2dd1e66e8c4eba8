"""Moving memory over HTTP: a user's export (or everyone's) streamed as JSON Lines, and an
import of such a file as the request body.

The export's first line is read before the response starts, so a bad user id or a
store that is down is an error response, not a 200 with nothing in it; a failure after
that ends the stream without the export's end record, and an import of what arrived is
refused as cut short. The import's body is bounded by ``MEMSTACK_MAX_BODY_BYTES``:
larger files go through ``memstack import``. Under API keys a user key reaches its own
user's export (``/v1/users/<user>/…``); the export of everyone and the import need an
admin key (memstack.server.http.guard).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from memstack.server.http.params import MemoryDep, Route, UserId

NDJSON = "application/x-ndjson"
# Lines sent per write: a few large writes, not one per message.
FLUSH_BYTES = 64 * 1024


class ImportOut(BaseModel):
    """What ``POST /v1/import`` found and wrote."""

    users: list[str] = Field(description="The users of the file.")
    records: dict[str, int] = Field(description="Records of the file by type.")
    written: dict[str, int] = Field(
        description="New rows by type (message, fact, summary, tool_result); sessions whose "
        "state was set (state); documents added or replaced (document). Zero for a file "
        "imported before."
    )


async def _streamed(lines: AsyncIterator[str]) -> StreamingResponse:
    first = await anext(lines)  # the header: errors until here are an error response

    async def body() -> AsyncIterator[bytes]:
        buffer = [first]
        size = len(first)
        async for line in lines:
            buffer.append(line)
            size += len(line)
            if size >= FLUSH_BYTES:
                yield "".join(buffer).encode("utf-8")
                buffer, size = [], 0
        yield "".join(buffer).encode("utf-8")

    return StreamingResponse(body(), media_type=NDJSON)


async def export_user(user_id: UserId, mem: MemoryDep) -> StreamingResponse:
    """The user's memory as JSON Lines (memstack's export format): the ledger, the whole
    fact history, summaries, tool results and task state. Import it with ``POST
    /v1/import`` or ``memstack import``."""
    return await _streamed(mem.export_lines(user_id))


async def export_all(mem: MemoryDep) -> StreamingResponse:
    """Every user's memory and the knowledge base as JSON Lines."""
    return await _streamed(mem.export_lines())


async def import_file(request: Request, mem: MemoryDep) -> ImportOut:
    """Read an export into this deployment. The whole body is checked before anything
    is written: a bad line is a 422 naming it, and nothing changes. Rows already here are
    kept, so importing a file twice writes nothing the second time."""
    report = await mem.import_file(await request.body())
    return ImportOut(users=report.users, records=report.records, written=report.written)


_LINES: dict[str, Any] = {"schema": {"type": "string", "description": "JSON Lines"}}
_EXPORT: dict[str, Any] = {
    "response_class": StreamingResponse,
    "responses": {200: {"content": {NDJSON: _LINES}, "description": "The export."}},
}
_IMPORT: dict[str, Any] = {
    "openapi_extra": {
        "requestBody": {
            "required": True,
            "description": "An export: its header line, its records, its end record.",
            "content": {NDJSON: _LINES},
        }
    }
}
ROUTES: list[Route] = [
    ("GET", "/users/{user_id}/export", export_user, _EXPORT),
    ("GET", "/export", export_all, _EXPORT),
    ("POST", "/import", import_file, _IMPORT),
]
