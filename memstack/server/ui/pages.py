"""The inspector's pages: users → sessions → messages, a user's facts and their timeline,
the fact candidates waiting for a decision (decided in :mod:`.decisions`), the context
preview with its manifest, the knowledge base, and the queue and stores.

Server-rendered (Jinja2, every value escaped) over the same ``AsyncMemory`` and the same
keys as the API: the guard admits a page as it admits a call, and a user key sees only
its own user. The pages only read; deciding a candidate is the one write. Every list that
grows with use is paged, so a user with ten thousand messages reads like one with ten.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BeforeValidator, Field

from memstack import NotFound, UserIdentity
from memstack.core.ids import DEFAULT_NAMESPACE
from memstack.server.http.guard import viewer_of
from memstack.server.http.manage_routes import MsgId
from memstack.server.http.params import MemoryDep, SessionId, UserId
from memstack.server.schemas import Namespace
from memstack.server.ui import dates, views
from memstack.server.ui.decisions import CandidateView
from memstack.server.ui.render import render
from memstack.server.ui.text import language_of, words

USERS_PER_PAGE = 50
SESSIONS_PER_PAGE = 50
MESSAGES_PER_PAGE = 50
CANDIDATES_PER_PAGE = 50
DEAD_LETTERS_SHOWN = 100
KB_HITS_SHOWN = 10

# A form's empty field arrives as "": no value, not a malformed one.
_EMPTY_IS_NONE = BeforeValidator(lambda value: None if value == "" else value)
Positive = Annotated[int, Field(ge=1)]
PageNumber = Annotated[Positive | None, _EMPTY_IS_NONE, Query(description="A page, from 1.")]
Text = Annotated[str, Query(max_length=4096)]
# The candidate a decision just confirmed or rejected, for the page's notice.
Decided = Annotated[Positive | None, _EMPTY_IS_NONE, Query(description="A candidate's id.")]


async def start(request: Request, mem: MemoryDep, page: PageNumber = None) -> Response:
    """Every user, by id; a user key goes straight to its own user's page."""
    viewer = viewer_of(request.scope)
    if viewer is not None and viewer.user_id is not None:
        return RedirectResponse(f"/ui/users/{viewer.user_id}", status_code=303)
    number = page or 1
    # One more than a page tells whether there is a next one, without counting every user.
    users = await mem.users(limit=USERS_PER_PAGE + 1, offset=(number - 1) * USERS_PER_PAGE)
    return render(
        request,
        "users.html",
        users=users[:USERS_PER_PAGE],
        page=number,
        has_next=len(users) > USERS_PER_PAGE,
    )


async def user(
    request: Request,
    user_id: UserId,
    mem: MemoryDep,
    as_of: Annotated[str, Query(max_length=64, description="Facts as they stood then.")] = "",
    page: PageNumber = None,
    candidates: Annotated[CandidateView, Query(description="Which candidates.")] = "pending",
    cpage: PageNumber = None,
    confirmed: Decided = None,
    rejected: Decided = None,
) -> Response:
    """A user's names, sessions, current facts (or as of a moment), each fact's timeline
    and the fact candidates (pending ones unless asked otherwise), with what was just
    decided."""
    moment = dates.parse(as_of, dates.zone_of(request)) if as_of.strip() else None
    if as_of.strip() and moment is None:
        return _not_a_time(request, as_of)
    sessions = await mem.sessions(user_id)
    pager = views.Pager.of(len(sessions), SESSIONS_PER_PAGE, page, last_first=True)
    shown = sessions[pager.offset : pager.offset + pager.size]
    listed = await mem.candidates(user_id, status=candidates)
    candidate_pager = views.Pager.of(len(listed), CANDIDATES_PER_PAGE, cpage)
    try:
        names: UserIdentity | None = await mem.identity(user_id)
    except NotFound:
        names = None  # nothing of the user stored yet, so no name bound either
    return render(
        request,
        "user.html",
        user_id=user_id,
        names=names,
        sessions=list(reversed(shown)),
        pager=pager,
        facts=await mem.facts(user_id, as_of=moment),
        as_of=moment,
        example=datetime.now(UTC).replace(microsecond=0),
        timelines=views.timelines(await mem.fact_history(user_id)),
        view=candidates,
        candidates=listed[candidate_pager.offset : candidate_pager.offset + candidate_pager.size],
        candidate_count=len(listed),
        candidate_pager=candidate_pager,
        notice=views.Notice.of(confirmed=confirmed, rejected=rejected),
    )


async def session(
    request: Request,
    user_id: UserId,
    session_id: SessionId,
    mem: MemoryDep,
    page: PageNumber = None,
) -> Response:
    """One page of the session's ledger (its newest page first) beside the Redis window."""
    overview = next((s for s in await mem.sessions(user_id) if s.session_id == session_id), None)
    total = overview.messages if overview is not None else 0
    pager = views.Pager.of(total, MESSAGES_PER_PAGE, page, last_first=True)
    # The whole window Redis holds, not only the part context() reads.
    window = await mem.window(user_id, session_id, mem.settings.window_max_messages)
    ledger = await mem.messages(user_id, session_id, limit=pager.size, offset=pager.offset)
    # The ledger's tail as long as the window tells which window messages are stored.
    tail_offset = max(0, total - len(window))
    tail = (
        await mem.messages(user_id, session_id, limit=len(window), offset=tail_offset)
        if window and total
        else []
    )
    stored = {m.msg_id for m in (*ledger, *tail)}
    return render(
        request,
        "session.html",
        user_id=user_id,
        session_id=session_id,
        total=total,
        pager=pager,
        rows=views.ledger_rows(ledger, window),
        window=views.window_rows(window, stored),
    )


async def message(request: Request, user_id: UserId, msg_id: MsgId, mem: MemoryDep) -> Response:
    """One message (a fact's source links here, whatever page of its session it is on),
    the facts it stated and the fact candidates read from it."""
    found = await mem.get_message(user_id, msg_id)
    history = await mem.fact_history(user_id)
    endings = views.endings(history)
    ended = [
        views.Version(f, endings[f.id])
        for f in history
        if f.id in endings and endings[f.id].msg_id == found.msg_id
    ]
    return render(
        request,
        "message.html",
        user_id=user_id,
        message=found,
        facts=[f for f in history if f.msg_id == found.msg_id],
        endings=endings,
        ended=ended,
        candidates=[
            c for c in await mem.candidates(user_id, status="all") if c.msg_id == found.msg_id
        ],
    )


def _not_a_time(request: Request, text: str) -> Response:
    """A time field that names no moment: said on a page, with a time as the pages show
    them to copy."""
    t = words(language_of(request))
    shown = dates.show(
        datetime.now(UTC).replace(microsecond=0), language_of(request), dates.zone_of(request)
    )
    detail = t["not_a_time"].format(text=text, example=shown)
    return render(request, "error.html", status=422, error=t["not_a_time_title"], detail=detail)


async def context_preview(
    request: Request,
    user_id: UserId,
    mem: MemoryDep,
    q: Text = "",
    session_id: Annotated[str, Query(alias="session", max_length=128)] = "",
    budget: Annotated[
        Positive | None, _EMPTY_IS_NONE, Query(description="Tokens; default the settings'.")
    ] = None,
) -> Response:
    """The context ``context()`` assembles for a question, and its manifest."""
    sessions = await mem.sessions(user_id)
    chosen = session_id or (sessions[-1].session_id if sessions else "inspector")
    result = None
    if q.strip():
        result = await mem.context(user_id, chosen, q, budget_tokens=budget)
    return render(
        request,
        "context.html",
        user_id=user_id,
        sessions=[s.session_id for s in reversed(sessions)],
        chosen=chosen,
        q=q,
        budget=budget,
        result=result,
        manifest=views.manifest_order(result.manifest) if result else [],
        budgets=views.layer_budgets(result.allocation) if result else [],
    )


async def knowledge(
    request: Request,
    mem: MemoryDep,
    namespace: Annotated[Namespace, Query()] = DEFAULT_NAMESPACE,
    q: Text = "",
) -> Response:
    """The knowledge base's documents in a namespace, and a search of it."""
    hits = await mem.kb_search(q, KB_HITS_SHOWN, namespace=namespace) if q.strip() else None
    return render(
        request,
        "knowledge.html",
        namespace=namespace,
        documents=await mem.kb_list(namespace=namespace),
        q=q,
        hits=hits,
    )


async def operations(request: Request, mem: MemoryDep) -> Response:
    """Each store's health, the ingest backlog, the live workers and each stream's lag,
    and the dead letters with their errors."""
    return render(
        request,
        "operations.html",
        health=await mem.health(),
        backlog=await mem.backlog(),
        ingest=await mem.status(),
        # The embedded queue is drained in process; no worker is expected there.
        embedded=mem.settings.embedded_redis,
        dead=await mem.dead_letters(DEAD_LETTERS_SHOWN),
    )


def router() -> APIRouter:
    pages = APIRouter(prefix="/ui", include_in_schema=False, default_response_class=HTMLResponse)
    routes: list[tuple[str, Any]] = [
        ("", start),
        ("/users/{user_id}", user),
        ("/users/{user_id}/sessions/{session_id}", session),
        ("/users/{user_id}/messages/{msg_id:path}", message),
        ("/users/{user_id}/context", context_preview),
        ("/knowledge", knowledge),
        ("/operations", operations),
    ]
    for path, endpoint in routes:
        pages.add_api_route(path, endpoint, methods=["GET"])
    return pages
