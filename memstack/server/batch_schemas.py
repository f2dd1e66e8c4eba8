"""Wire models of the batch remember, shared by the HTTP route and the MCP tool."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memstack.core.messages import MAX_BATCH
from memstack.server.schemas import Id, RememberIn


class BatchMessageIn(RememberIn):
    # A misspelt field would otherwise be dropped without a word (a name, a time).
    model_config = ConfigDict(extra="forbid")

    msg_id: Id = Field(
        description="Required in a batch, your idempotency key: the same batch sent again "
        "stores nothing twice (each message answers duplicate)."
    )


class RememberBatchIn(BaseModel):
    messages: Annotated[list[BatchMessageIn], Field(min_length=1, max_length=MAX_BATCH)] = Field(
        description=f"1 to {MAX_BATCH} messages of the session, stored in this order. All "
        "are checked first: one that fails a check is 422 naming its index, and nothing "
        "is stored."
    )


class RememberedOut(BaseModel):
    msg_id: str = Field(description="The stored id, as the single remember returns it.")
    status: Literal["ok", "duplicate", "error"] = Field(
        description="ok: stored now; duplicate: stored before with this very message, "
        "nothing changed; error: nothing of it stored (error and detail say why)."
    )
    error: str | None = Field(default=None, description="The error's type, e.g. Conflict.")
    detail: str | None = None


class RememberBatchOut(BaseModel):
    results: list[RememberedOut] = Field(description="One per message, in the order sent.")


def batch_item(m: BatchMessageIn) -> dict[str, Any]:
    """A message of the request as ``remember_many`` takes it."""
    return {"role": m.role, "content": m.content, "msg_id": m.msg_id, "ts": m.ts, "name": m.name}
