"""A failed page as a page: the API's error (type and detail, already free of store
addresses and SQL) shown in the frame, in the viewer's language; and a page the signed-in
key may not open, saying which key that is and how to sign in with another."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from memstack.server.ui.render import render


def error_page(request: Request, response: Response) -> Response:
    """``response``, the API's JSON error for this request, as an HTML page."""
    try:
        body = json.loads(bytes(response.body))
        error, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        return response
    page = render(request, "error.html", status=response.status_code, error=error, detail=detail)
    for name in ("allow", "www-authenticate"):
        if name in response.headers:
            page.headers[name] = response.headers[name]
    return page


def refused_page(scope: Scope) -> Response:
    """The 403 for a page: the guard has refused the key (kept in the request's state),
    so nothing of the page asked for is read; the page names the key and the way out."""
    return render(Request(scope), "refused.html", status=403)
