"""What the routes of the HTTP API share: the memory of the app, the path and query
parameters with their constraints, the error responses every route can give, and the
shape of a route table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, cast

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPBearer

from memstack import AsyncMemory
from memstack.core.ids import MAX_ID_LEN
from memstack.server.schemas import ID_PATTERN, ErrorOut, Namespace


def _memory(request: Request) -> AsyncMemory:
    return cast(AsyncMemory, request.app.state.memory)


MemoryDep = Annotated[AsyncMemory, Depends(_memory)]
# Declares the scheme in the OpenAPI document; the check itself is the guard's, made
# before the body is read.
bearer = HTTPBearer(auto_error=False, description="An API key or MEMSTACK_API_TOKEN.")


def _id_param(what: str) -> Any:
    return Path(pattern=ID_PATTERN, min_length=1, max_length=MAX_ID_LEN, description=what)


UserId = Annotated[str, _id_param("The user; every call names one.")]
SessionId = Annotated[str, _id_param("A session of the user.")]
DocId = Annotated[str, _id_param("A knowledge-base document.")]
Ref = Annotated[str, _id_param("A `$ref` left in the task state.")]
NamespaceQuery = Annotated[Namespace, Query()]
PageLimit = Annotated[int, Query(ge=1, le=1000, description="Items per page.")]
PageOffset = Annotated[int, Query(ge=0, description="Items to skip.")]

SESSION = "/users/{user_id}/sessions/{session_id}"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (401, 403, 404, 413, 422, 500, 503)
}
# (method, path under /v1, endpoint, add_api_route options): one table per module of routes.
Route = tuple[str, str, Callable[..., Any], dict[str, Any]]
