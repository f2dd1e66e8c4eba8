"""Schemathesis against the live app: every operation of the OpenAPI document, positive
and negative cases (explicit examples, boundary coverage, fuzzing; 25 generated examples
per operation), every check, on the real Redis and PostgreSQL, behind a bearer token.

The document is built from the app at import (collection needs it; building it opens no
store) and is the one the live app serves (``test_the_live_app_serves_this_document``).
The cases then go to the live app, which ``live_app`` opens on a fresh database.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from fastapi import FastAPI
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.python import asgi as st_asgi

from memstack.core.identity import name_key
from memstack.core.settings import load_settings
from memstack.server.http import create_app
from memstack.server.schemas import MAX_BUDGET_TOKENS
from memstack.text.token_counts import count_tokens
from tests.conftest import make_settings

TOKEN = "schemathesis-token-0123456789"
with tempfile.TemporaryDirectory() as _home:
    DOCUMENT = create_app(
        load_settings(home=Path(_home), embedder="hashing", api_token=TOKEN)
    ).openapi()
schema = schemathesis.openapi.from_dict(DOCUMENT)
# Deterministic: CI runs the same cases every time (a failure is reproducible, never a
# fluke of the seed); runs with other seeds found nothing either.
schema.config.generation.update(max_examples=25, database="none", deterministic=True)
schema.config.update(base_url="http://testserver", headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.fixture(scope="module")
def live_app(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, pg_url: str
) -> Iterator[FastAPI]:
    settings = make_settings(
        tmp_path_factory.mktemp("schemathesis"),
        redis_url=redis_url,
        database_url=pg_url,
        auto_migrate=False,
        api_token=TOKEN,
    )
    app = create_app(settings)
    yield app
    # Schemathesis started the app's lifespan on first call: close its memory.
    st_asgi.shutdown_lifespans()


# --- rules JSON Schema cannot state ----------------------------------------------------------
# Each is a rule across fields or against the clock, refused with a 422 that names it. A
# positive case is made to keep it, so that the checks judge everything else.


def _fit_budget(body: dict[str, Any]) -> None:
    # budget_tokens must hold the system text and the query.
    if not isinstance(body.get("query"), str):
        return
    system = body.get("system") if isinstance(body.get("system"), str) else ""
    needed = count_tokens(body["query"]) + count_tokens(system) + 200
    budget = body.get("budget_tokens")
    if not isinstance(budget, int) or budget < needed:
        body["budget_tokens"] = min(max(needed, 4000), MAX_BUDGET_TOKENS)


def _fit_time(body: dict[str, Any]) -> None:
    # A message's time lies between 1970 and a day from now.
    ts = body.get("ts")
    if isinstance(ts, int | float) and not isinstance(ts, bool) and ts > time.time():
        body["ts"] = time.time() - 60
    elif isinstance(ts, str):
        try:
            parsed = datetime.fromisoformat(ts.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        if parsed.tzinfo is not None and not epoch <= parsed <= datetime.now(UTC):
            body["ts"] = "2025-01-01T00:00:00Z"


def _fit_batch_times(body: dict[str, Any]) -> None:
    # The same rule for each message of a batch.
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            _fit_time(message)


def _unique_doc_ids(body: dict[str, Any]) -> None:
    # A request names each document once (a document without an id is named by its text).
    seen: set[str] = set()
    for i, doc in enumerate(body.get("documents") or []):
        if not isinstance(doc, dict):
            continue
        given = doc.get("doc_id")
        key = given if isinstance(given, str) else f"text:{doc.get('text')}"
        if key in seen:
            doc["doc_id"] = key = f"schemathesis.{i}"
        seen.add(key)


def _ordered_range(body: dict[str, Any]) -> None:
    # A search's since must not be after its until.
    moments = []
    for end in ("since", "until"):
        value = body.get(end)
        if isinstance(value, int | float) and not isinstance(value, bool):
            moments.append(float(value))
        elif isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
                if parsed.tzinfo is None:
                    return
                moments.append(parsed.timestamp())
            except (ValueError, OverflowError):
                return
    if len(moments) == 2 and moments[0] > moments[1]:
        body["since"], body["until"] = body["until"], body["since"]


def _as_of_alone(query: dict[str, Any]) -> None:
    # as_of lists the candidates pending at that moment: with another status it is refused.
    if query.get("as_of") is not None and query.get("status", "pending") != "pending":
        query["status"] = "pending"


def _names_once(body: dict[str, Any]) -> None:
    # The user's names are given once each, compared ignoring case and width.
    display, aliases = body.get("display_name"), body.get("aliases")
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        return
    seen = {name_key(display)} if isinstance(display, str) else set()
    kept = []
    for alias in aliases:
        if name_key(alias) not in seen:
            seen.add(name_key(alias))
            kept.append(alias)
    body["aliases"] = kept


FITS = {
    "context": _fit_budget,
    "messages": _fit_time,
    "batch": _fit_batch_times,
    "documents": _unique_doc_ids,
    "search": _ordered_range,
}


# An import's body is JSON Lines, whose format no JSON Schema states: a case's body goes
# as text (a string as it is, anything else as its JSON), and a positive case is an export
# (of nobody) the server must accept.
EMPTY_EXPORT = (
    '{"type":"header","format":"memstack-export","version":1,'
    '"exported_at":"2026-01-01T00:00:00+00:00","users":[]}\n{"type":"end","records":0}\n'
)


@schemathesis.serializer("application/x-ndjson")
def _json_lines(context: Any, value: Any) -> bytes:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.encode("utf-8", "surrogatepass")


@schema.hook
def map_case(context: Any, case: Any) -> Any:
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return case
    if case.operation.path == "/v1/import":
        case.body = EMPTY_EXPORT
        return case
    if case.operation.path.endswith("/candidates") and isinstance(case.query, dict):
        _as_of_alone(case.query)
    if case.operation.path.endswith("/identity") and isinstance(case.body, dict):
        _names_once(case.body)
    fit = FITS.get(case.operation.path.rsplit("/", 1)[-1])
    if fit is not None and case.operation.method.upper() == "POST" and isinstance(case.body, dict):
        fit(case.body)
    return case


# --- the run --------------------------------------------------------------------------------


@schema.parametrize()
@hypothesis.settings(deadline=None)
def test_api(case: Any, live_app: FastAPI) -> None:
    # Point the operation, and the schema its checks re-send through, at the live app.
    case.operation.app = case.operation.schema.app = live_app
    case.call_and_validate()


def test_the_live_app_serves_this_document(live_app: FastAPI) -> None:
    assert live_app.openapi() == DOCUMENT
    assert len([op for ops in DOCUMENT["paths"].values() for op in ops]) == 34


def test_every_check_is_on() -> None:
    load_all_checks()
    config = schema.config.checks_config_for()
    names = CHECKS.get_all_names()
    assert len(names) >= 14
    assert [n for n in names if not getattr(config, n).enabled] == []
