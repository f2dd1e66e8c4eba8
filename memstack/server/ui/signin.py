"""Signing in to the inspector with an API key (or the token), kept in a cookie.

A browser cannot put a bearer header on a link, so the key the sign-in form takes rides
in a cookie the guard reads for ``/ui`` pages only: HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), scoped to ``/ui``. Signing out drops it.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from memstack.core.settings import Settings
from memstack.server.http.guard import PAGE_KEY_COOKIE, PAGE_SIGN_IN, PAGES
from memstack.server.http.params import MemoryDep
from memstack.server.ui.render import render

MAX_KEY_CHARS = 512


def router(settings: Settings) -> APIRouter:
    token = settings.api_token.get_secret_value() if settings.api_token else None

    async def accepted(mem: MemoryDep, key: str) -> bool:
        if token is not None and secrets.compare_digest(key.encode(), token.encode()):
            return True
        return await mem.authenticate(key) is not None

    async def sign_in_page(request: Request, mem: MemoryDep) -> Response:
        is_open = token is None and not await mem.has_keys()
        return render(request, "signin.html", is_open=is_open, wrong=False)

    async def sign_in(request: Request, mem: MemoryDep) -> Response:
        form = await request.form()
        key = str(form.get("key") or "").strip()[:MAX_KEY_CHARS]
        if not key or not await accepted(mem, key):
            return render(request, "signin.html", status=401, is_open=False, wrong=True)
        response = RedirectResponse(PAGES, status_code=303)
        response.set_cookie(
            PAGE_KEY_COOKIE,
            key,
            path=PAGES,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def sign_out() -> Response:
        response = RedirectResponse(PAGE_SIGN_IN, status_code=303)
        response.delete_cookie(PAGE_KEY_COOKIE, path=PAGES)
        return response

    pages = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)
    pages.add_api_route(PAGE_SIGN_IN, sign_in_page, methods=["GET"])
    pages.add_api_route(PAGE_SIGN_IN, sign_in, methods=["POST"])
    pages.add_api_route(f"{PAGES}/logout", sign_out, methods=["GET", "POST"])
    return pages
