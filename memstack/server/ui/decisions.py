"""Deciding a fact candidate from the user's page: its Confirm and Reject buttons post
here, the public API decides (``confirm_candidate`` / ``reject_candidate``), and the
browser is sent back to the user's page with a notice.

The guard admits these posts as it admits the user's pages (a user key reaches only its
own user's). The key's cookie is SameSite=Strict, so another site's form does not carry
it; but an open API (no key, no token) has no cookie to withhold, and a browser on the
deployment's network would still post another site's form to it. So a post must also
come from a page of this server: its ``Origin`` (or, from a browser that sends none, its
``Referer``) must name the host the request was sent to.
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from memstack.core.ids import MAX_CANDIDATE_ID
from memstack.server.http.params import MemoryDep, UserId
from memstack.server.ui.render import render
from memstack.server.ui.text import language_of, words

CandidateId = Annotated[int, Path(ge=1, le=MAX_CANDIDATE_ID, description="A fact candidate.")]
# Which of the user's candidates the page lists: those waiting for a decision (the
# default), those of one outcome, or every one.
CandidateView = Literal["pending", "confirmed", "rejected", "superseded", "all"]
ViewQuery = Annotated[CandidateView, Query(description="The list to return to.")]


def same_origin(request: Request) -> bool:
    """Whether the post came from a page of this server. The scheme is not compared: a
    proxy that ends TLS passes the browser's https origin to an app that sees http."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    host = request.headers.get("host")
    if not claimed or not host or claimed == "null":
        return False
    return urlsplit(claimed).netloc.lower() == host.lower()


def _cross_site(request: Request) -> Response:
    detail = words(language_of(request))["cross_site"]
    return render(request, "error.html", status=403, error="Forbidden", detail=detail)


def _back(user_id: str, decided: str, candidate_id: int, view: CandidateView) -> Response:
    """The user's page, the candidates as they were listed, with what was decided."""
    shown = {} if view == "pending" else {"candidates": view}
    query = urlencode({**shown, decided: candidate_id})
    return RedirectResponse(f"/ui/users/{user_id}?{query}#candidates", status_code=303)


async def confirm(
    request: Request,
    user_id: UserId,
    candidate_id: CandidateId,
    mem: MemoryDep,
    candidates: ViewQuery = "pending",
) -> Response:
    """The candidate becomes the user's current fact; 404 for a candidate the user does
    not have, 409 for one already decided."""
    if not same_origin(request):
        return _cross_site(request)
    await mem.confirm_candidate(user_id, candidate_id)
    return _back(user_id, "confirmed", candidate_id, candidates)


async def reject(
    request: Request,
    user_id: UserId,
    candidate_id: CandidateId,
    mem: MemoryDep,
    candidates: ViewQuery = "pending",
) -> Response:
    """The candidate is kept as rejected and never served; 404 and 409 as confirming."""
    if not same_origin(request):
        return _cross_site(request)
    await mem.reject_candidate(user_id, candidate_id)
    return _back(user_id, "rejected", candidate_id, candidates)


def router() -> APIRouter:
    decisions = APIRouter(
        prefix="/ui/users/{user_id}/candidates/{candidate_id}",
        include_in_schema=False,
        default_response_class=HTMLResponse,
    )
    decisions.add_api_route("/confirm", confirm, methods=["POST"])
    decisions.add_api_route("/reject", reject, methods=["POST"])
    return decisions
