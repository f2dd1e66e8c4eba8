"""Rendering a page: the templates (every value escaped), the viewer's language, and what
every page's frame needs (who is looking, the links they may follow)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from memstack.server.http.guard import PAGE_KEY_COOKIE, viewer_of
from memstack.server.ui import dates, views
from memstack.server.ui.text import LANG_COOKIE, language_of, words

# Escaping is on for every template: messages, facts and documents are users' text.
_TEMPLATES = Environment(
    loader=PackageLoader("memstack.server.ui", "templates"),
    autoescape=select_autoescape(default=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_TEMPLATES.globals.update(iso=views.iso)
ONE_YEAR_S = 365 * 24 * 3600


def _switch_url(request: Request, lang: str) -> str:
    """This page in the other language."""
    other = "en" if lang == "zh" else "zh"
    return str(request.url.include_query_params(lang=other).replace(scheme="", netloc=""))


def render(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    lang = language_of(request)
    zone = dates.zone_of(request)
    viewer = viewer_of(request.scope)

    # Every time and value on a page goes through these two, so a page cannot mix formats.
    def show(moment: datetime) -> str:
        return dates.show(moment, lang, zone)

    def value_text(value: Any) -> str:
        return views.value_text(value, lang)

    html = _TEMPLATES.get_template(template).render(
        t=words(lang),
        lang=lang,
        show=show,
        value_text=value_text,
        zone=dates.zone_name(zone),
        switch_url=_switch_url(request, lang),
        # The token, an admin key or an open API see every user and the operations page.
        sees_all=viewer is None or viewer.admin,
        viewer=viewer,
        signed_in=PAGE_KEY_COOKIE in request.cookies,
        **values,
    )
    response = HTMLResponse(html, status_code=status)
    if request.query_params.get("lang") == lang:
        response.set_cookie(LANG_COOKIE, lang, max_age=ONE_YEAR_S, path="/ui", samesite="lax")
    return response
