"""The memory inspector: pages under ``/ui`` in the API's own process (``memstack serve``).

What the agent remembers about a user, why a context held a line, which fact replaced
which — read in a browser, in English or Chinese, with nothing to build or download:
templates and one small script ship in the package. ``install(app, settings)`` adds the
pages to the API's app; the API's guard admits them with the same keys.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from memstack.core.settings import Settings
from memstack.server.http.guard import PAGE_STATIC
from memstack.server.ui import decisions, pages, signin
from memstack.server.ui.errors import error_page, refused_page

__all__ = ["error_page", "install", "refused_page"]


def install(app: FastAPI, settings: Settings) -> None:
    app.include_router(signin.router(settings))
    app.include_router(pages.router())
    app.include_router(decisions.router())
    static = Path(__file__).parent / "static"
    app.mount(PAGE_STATIC.rstrip("/"), StaticFiles(directory=static), name="ui-static")
