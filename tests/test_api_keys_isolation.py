"""One user's key never reaches another user's memory: the path check against tricky
paths, and a randomized run of many users and keys over every /v1/users route the app
has (read from its OpenAPI document, so routes added later are covered too)."""

from __future__ import annotations

import os
import random
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from memstack import AsyncMemory
from memstack.core.settings import Settings
from memstack.server.http import create_app
from tests.test_api_keys import bearer
from tests.test_api_limits import raw_call


@pytest.fixture
async def app_and_memory(
    service_settings: Settings,
) -> AsyncIterator[tuple[Any, httpx.AsyncClient, AsyncMemory]]:
    app = create_app(service_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://memstack") as client:
            yield app, client, app.state.memory


async def test_a_user_key_is_judged_by_the_path_the_router_matches(
    app_and_memory: tuple[Any, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, client, mem = app_and_memory
    suffix = uuid.uuid4().hex[:8]
    al, alice = f"al{suffix}", f"al{suffix}ice"
    _, al_key = await mem.create_key(al)
    await mem.remember(alice, "s1", "user", "alice's secret plan")
    await mem.remember(al, "s1", "user", "al's own note")
    auth = bearer(al_key)

    # As the server hands paths on: decoded once (%2F is a slash), less root_path.
    refused = [
        f"/v1/users/{alice}/sessions/s1/messages",  # a user id with al's as its prefix
        f"/v1/users/{al}/../{alice}/sessions/s1/messages",
        f"/v1/users/{al}/sessions/../../{alice}/sessions/s1/messages",
        f"/v1/users/./{al}/sessions/s1/messages",
        f"/v1/users//{al}/sessions/s1/messages",
        f"/v1/users/{al}%2F..%2F{alice}/sessions/s1/messages",  # encoded twice: one stays
        "/v1/users",
        "/v1/users/",
        "/v1/admin/drain",
        "/v1",
        "/",
    ]
    for path in refused:
        status, _, body, _ = await raw_call(app, "GET", path, auth, [])
        assert status == 403, (path, status, body)
        assert b"secret plan" not in body
    # The same through a client that percent-encodes, and a trailing slash.
    for path in (
        f"/v1/users/{al}%2F..%2F{alice}/sessions/s1/messages",
        f"/v1/users/{alice}/sessions/s1/messages/",
        f"/v1/users/{alice.upper()}/sessions/s1/messages",
    ):
        r = await client.get(path, headers=auth)
        assert r.status_code == 403, (path, r.status_code, r.text)
    # Its own paths, with a trailing slash or percent-encoded letters, are its own.
    own = await client.get(f"/v1/users/{al}/sessions/s1/messages", headers=auth)
    assert own.status_code == 200 and "al's own note" in own.text
    encoded = f"/v1/users/{al.replace('a', '%61', 1)}/sessions/s1/messages"
    assert (await client.get(encoded, headers=auth)).status_code == 200
    slashed = await client.get(f"/v1/users/{al}/sessions/s1/messages/", headers=auth)
    assert slashed.status_code not in (401, 403)
    assert "secret plan" not in slashed.text
    assert [m.content for m in await mem.window(alice, "s1")] == ["alice's secret plan"]


# --- randomized: many users and keys, every route --------------------------------------------

SAMPLE_BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/messages"): {"role": "user", "content": "probe message"},
    ("POST", "/context"): {"query": "what did I say about my plan?", "budget_tokens": 2000},
    ("PATCH", "/state"): {"probe": "value"},
    ("POST", "/search"): {"query": "what is my plan?"},
}


def user_routes(app: Any) -> list[tuple[str, str, bool]]:
    """(method, path template, has a body) of every route under /v1/users."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        if path == "/v1/users" or path.startswith("/v1/users/"):
            for method, operation in operations.items():
                found.append((method.upper(), path, "requestBody" in operation))
    return found


def fill(template: str, user: str, session: str, rng: random.Random) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "user_id":
            return user
        if name == "session_id":
            return session
        return f"x{rng.randrange(1000)}"

    return re.sub(r"\{(\w+)\}", value, template)


def body_for(method: str, template: str) -> Any:
    for (m, tail), body in SAMPLE_BODIES.items():
        if m == method and template.endswith(tail):
            return body
    return {}


async def test_random_requests_over_every_user_route_leak_nothing(
    app_and_memory: tuple[Any, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, client, mem = app_and_memory
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    stem = uuid.uuid4().hex[:6]
    # Prefixes of each other, dots, case: ids a sloppy check would confuse.
    names = ["al", "alice", "al.ice", "Al", "al-", "bob", "bo", "carol", "c.arol", "dave"]
    users = {f"{stem}{n}": f"zq{uuid.uuid4().hex}" for n in names}  # user -> marker
    keys: dict[str, str] = {}
    sessions: dict[str, list[str]] = {}
    for user, marker in users.items():
        _, keys[user] = await mem.create_key(user)
        sessions[user] = [f"s{i}" for i in range(2)]
        for session in sessions[user]:
            for turn in range(2):
                await mem.remember(user, session, "user", f"My plan is {marker} number {turn}.")
            await mem.set_state(user, session, {"note": f"state of {marker}"})
    await mem.drain()

    routes = user_routes(app)
    assert len(routes) >= 8, routes
    counts = {"other": 0, "own": 0, "own_seen": 0}
    for _ in range(400):
        method, template, has_body = rng.choice(routes)
        caller = rng.choice(list(users))
        target = caller if rng.random() < 0.4 else rng.choice([u for u in users if u != caller])
        if target == caller and method == "DELETE":
            continue  # erasing one's own memory is allowed, and would end the run's data
        path = fill(template, target, rng.choice(sessions[target]), rng)
        body = body_for(method, template) if has_body else None
        r = await client.request(method, path, json=body, headers=bearer(keys[caller]))
        where = (seed, caller, method, path, r.status_code, r.text[:300])
        leaked = [u for u, marker in users.items() if u != caller and marker in r.text]
        assert leaked == [], where
        if target == caller and template != "/v1/users":
            counts["own"] += 1
            counts["own_seen"] += users[caller] in r.text
            assert r.status_code not in (401, 403) and r.status_code < 500, where
        else:
            counts["other"] += 1
            assert r.status_code == 403, where
    assert counts["other"] > 100 and counts["own"] > 50, counts
    # The own requests read real memory: the run is not vacuous.
    assert counts["own_seen"] > 20, counts

    # Nobody's memory was changed by another's key: every marker is where it was.
    for user, marker in users.items():
        for session in sessions[user]:
            stored = await mem.messages(user, session)
            assert sum(marker in m.content for m in stored) == 2, (seed, user)
            state = await mem.get_state(user, session)
            assert state.fields.get("note") == f"state of {marker}", (seed, user, state)


async def test_every_route_outside_the_users_own_is_forbidden_to_a_user_key(
    app_and_memory: tuple[Any, httpx.AsyncClient, AsyncMemory],
) -> None:
    """Enumerated from the app: routes added later (exports of everyone, imports, admin
    work) are closed to a user key unless they live under its user."""
    app, client, mem = app_and_memory
    _, key = await mem.create_key(f"u{uuid.uuid4().hex[:8]}")
    rng = random.Random(0)
    checked = 0
    for path, operations in app.openapi()["paths"].items():
        if not path.startswith("/v1/") or path.startswith(("/v1/users/", "/v1/knowledge/")):
            continue
        for method in operations:
            url = fill(path, "someone", "s1", rng)
            r = await client.request(method.upper(), url, json={}, headers=bearer(key))
            assert r.status_code == 403, (method, url, r.status_code, r.text)
            checked += 1
    assert checked >= 2  # at least GET /v1/users and POST /v1/admin/drain
