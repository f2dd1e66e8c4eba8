"""Fact candidates and the user's names over the HTTP API: listed, confirmed, rejected,
read and bound through the real app (services and embedded), bad requests refused with
nothing changed, and one user's key never reaching another user's candidates or names.

A candidate is made by ingesting a statement while MEMSTACK_FACT_MIN_CONFIDENCE is 1.0:
the rule extractor's confidences are below it, so every fact it reads waits as one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from memstack import AsyncMemory, Settings
from memstack.server.http import create_app
from tests.conftest import new_id
from tests.test_api import say, serve
from tests.test_api_keys import bearer

LOW_BAR = {"fact_min_confidence": 1.0}


@pytest.fixture
def low_bar(any_settings: Settings) -> Settings:
    """Every extracted fact becomes a candidate."""
    return any_settings.model_copy(update=LOW_BAR)


async def listed(client: httpx.AsyncClient, user: str, query: str = "") -> list[dict[str, Any]]:
    r = await client.get(f"/v1/users/{user}/candidates{query}")
    assert r.status_code == 200, r.text
    return list(r.json()["candidates"])


async def facts_of(client: httpx.AsyncClient, user: str) -> list[tuple[str, Any]]:
    r = await client.get(f"/v1/users/{user}/facts")
    assert r.status_code == 200, r.text
    return [(f["key"], f["value"]) for f in r.json()["facts"]]


async def test_candidates_are_listed_confirmed_and_rejected(low_bar: Settings) -> None:
    user = new_id("u")
    base = f"/v1/users/{user}"
    async with serve(low_bar) as (client, _mem):
        await say(client, user, "s1", "I live in Porto.", "Nice.", "I am vegetarian.")
        assert (await client.post("/v1/admin/drain")).status_code == 200

        pending = await listed(client, user)
        assert [(c["key"], c["value"], c["status"]) for c in pending] == [
            ("diet", "vegetarian", "pending"),
            ("city", "Porto", "pending"),
        ]
        assert all(c["user_id"] == user and c["confidence"] < 1.0 for c in pending)
        assert all(c["decided_at"] is None and c["fact_id"] is None for c in pending)
        assert await facts_of(client, user) == []  # never served while pending
        diet, city = pending
        assert [c["id"] for c in await listed(client, user, "?key=city")] == [city["id"]]
        before_decisions = datetime.now(UTC)

        r = await client.post(f"{base}/candidates/{city['id']}/confirm")
        assert r.status_code == 200, r.text
        fact = r.json()
        assert (fact["key"], fact["value"], fact["confidence"]) == ("city", "Porto", 1.0)
        assert fact["current"] and fact["candidate_id"] == city["id"]
        assert fact["msg_id"] == city["msg_id"]
        served = (await client.get(f"{base}/facts")).json()["facts"]
        assert [(f["key"], f["candidate_id"]) for f in served] == [("city", city["id"])]

        r = await client.post(f"{base}/candidates/{diet['id']}/reject")
        assert r.status_code == 200, r.text
        rejected = r.json()
        assert (rejected["id"], rejected["status"]) == (diet["id"], "rejected")
        assert rejected["decided_at"] is not None and rejected["fact_id"] is None

        # A decided candidate cannot be decided again, either way; nothing changes.
        for decided in (city, diet):
            for decision in ("confirm", "reject"):
                r = await client.post(f"{base}/candidates/{decided['id']}/{decision}")
                assert r.status_code == 409, r.text
                assert r.json()["error"] == "Conflict" and "pending" in r.json()["detail"]
        assert await facts_of(client, user) == [("city", "Porto")]

        assert await listed(client, user) == []
        every = {c["id"]: c for c in await listed(client, user, "?status=all")}
        assert every[city["id"]]["status"] == "confirmed"
        assert every[city["id"]]["fact_id"] == fact["id"]
        assert every[diet["id"]] == rejected
        assert [c["id"] for c in await listed(client, user, "?status=rejected")] == [diet["id"]]
        # As of a moment before the decisions, both were pending.
        then = await listed(client, user, "?as_of=" + quote(before_decisions.isoformat()))
        assert [(c["id"], c["status"]) for c in then] == [
            (diet["id"], "rejected"),
            (city["id"], "confirmed"),
        ]
        assert await listed(client, user, "?as_of=2000-01-01T00:00:00%2B08:00") == []

        # Erasure takes the candidates with their messages.
        erased = await client.delete(base)
        assert erased.status_code == 200 and erased.json()["deleted"]["candidates"] == 2
        assert await listed(client, user, "?status=all") == []


async def test_bad_candidate_requests_are_refused_and_change_nothing(low_bar: Settings) -> None:
    user = new_id("u")
    base = f"/v1/users/{user}"
    async with serve(low_bar) as (client, _mem):
        await say(client, user, "s1", "I live in Porto.")
        assert (await client.post("/v1/admin/drain")).status_code == 200
        [city] = await listed(client, user)

        for query, word in (
            ("?status=bogus", "status"),
            ("?status=rejected&as_of=2025-01-01T00:00:00Z", "as_of"),
            ("?as_of=2025-01-01T00:00:00", "as_of"),  # no offset
            ("?as_of=1700000000", "as_of"),
            ("?key=bad%20key", "key"),
        ):
            r = await client.get(f"{base}/candidates{query}")
            assert r.status_code == 422, (query, r.text)
            assert word in r.json()["detail"], (query, r.text)
        assert (await client.get(f"{base}/candidates?key=bad%20key")).json()["error"] == "InvalidId"

        for bad in ("0", "-1", "x", "1.5", str(2**63), "%20"):
            for decision in ("confirm", "reject"):
                r = await client.post(f"{base}/candidates/{bad}/{decision}")
                assert r.status_code == 422, (bad, decision, r.text)
                assert r.json()["error"] == "ValidationError", r.text
        unknown = city["id"] + 10**9
        for decision in ("confirm", "reject"):
            r = await client.post(f"{base}/candidates/{unknown}/{decision}")
            assert r.status_code == 404 and r.json()["error"] == "NotFound", r.text
        r = await client.post(f"/v1/users/bad%20id/candidates/{city['id']}/confirm")
        assert r.status_code == 422 and r.json()["error"] == "InvalidId"
        r = await client.get(f"{base}/candidates/{city['id']}/confirm")
        assert r.status_code == 405

        assert await listed(client, user) == [city]
        assert await facts_of(client, user) == []
        assert await listed(client, new_id("nobody")) == []


async def test_the_users_names_are_read_and_bound(low_bar: Settings) -> None:
    user = new_id("u")
    url = f"/v1/users/{user}/identity"
    async with serve(low_bar) as (client, _mem):
        await say(client, user, "s1", "Hello.")
        assert (await client.post("/v1/admin/drain")).status_code == 200
        nobody = {"user_id": user, "display_name": None, "aliases": []}
        assert (await client.get(url)).json() == nobody

        bound = {"display_name": "Ann Lee", "aliases": ["Annie", "ＡＬ"]}
        r = await client.put(url, json=bound)
        assert r.status_code == 200, r.text
        assert r.json() == {"user_id": user, **bound}
        r = await client.put(url, json={"display_name": "  Ann Lee ", "aliases": ["Annie", "ＡＬ"]})
        assert r.json() == {"user_id": user, **bound}  # stripped, as a message author is

        for body, error, word in (
            ({"display_name": "Ann: Lee"}, "InvalidContent", "display_name"),
            ({"aliases": ["Annie", "a\nb"]}, "InvalidContent", "aliases"),
            ({"display_name": ""}, "InvalidContent", "display_name"),
            ({"display_name": "x" * 65}, "InvalidContent", "display_name"),
            ({"aliases": ["Annie", "ANNIE"]}, "ValidationError", "twice"),
            ({"display_name": "Ann", "aliases": ["ａｎｎ"]}, "ValidationError", "twice"),
            ({"aliases": "Annie"}, "ValidationError", "aliases"),
            ({"aliases": [None]}, "ValidationError", "aliases"),
            ({"aliases": [f"n{i}" for i in range(33)]}, "ValidationError", "aliases"),
            ({"display_name": 5}, "ValidationError", "display_name"),
        ):
            r = await client.put(url, json=body)
            assert r.status_code == 422, (body, r.text)
            assert (r.json()["error"], word in r.json()["detail"]) == (error, True), (body, r.text)
        assert (await client.get(url)).json() == {"user_id": user, **bound}

        # Only the user's own words become the user's facts: under a bound name, or none.
        msgs = f"/v1/users/{user}/sessions/s2/messages"
        for name, text in (("annie", "I live in Lisbon."), ("Bob", "I am vegetarian.")):
            body = {"role": "user", "content": text, "name": name}
            assert (await client.post(msgs, json=body)).status_code == 201
        assert (await client.post("/v1/admin/drain")).status_code == 200
        assert [(c["key"], c["value"]) for c in await listed(client, user)] == [("city", "Lisbon")]

        r = await client.put(url, json={})  # an empty body unbinds every name
        assert r.status_code == 200 and r.json() == nobody

        stranger = f"/v1/users/{new_id('nobody')}/identity"
        for method, body in (("GET", None), ("PUT", bound)):
            r = await client.request(method, stranger, json=body)
            assert r.status_code == 404 and r.json()["error"] == "NotFound", r.text
        assert (await client.get(stranger)).status_code == 404  # the PUT made no user


async def test_the_openapi_document_states_the_new_routes(low_bar: Settings) -> None:
    async with serve(low_bar) as (client, _mem):
        doc = (await client.get("/openapi.json")).json()
    paths, schemas = doc["paths"], doc["components"]["schemas"]
    assert set(paths["/v1/users/{user_id}/candidates"]) == {"get"}
    for decision in ("confirm", "reject"):
        operation = paths[f"/v1/users/{{user_id}}/candidates/{{candidate_id}}/{decision}"]["post"]
        assert {"200", "404", "409", "422"} <= set(operation["responses"])
        [candidate_id] = [p for p in operation["parameters"] if p["name"] == "candidate_id"]
        assert candidate_id["schema"]["minimum"] == 1
    assert set(paths["/v1/users/{user_id}/identity"]) == {"get", "put"}
    status = next(
        p
        for p in paths["/v1/users/{user_id}/candidates"]["get"]["parameters"]
        if p["name"] == "status"
    )
    assert status["schema"]["enum"] == ["pending", "confirmed", "rejected", "superseded", "all"]
    assert "candidate_id" in schemas["FactOut"]["properties"]
    assert schemas["IdentityIn"]["properties"]["aliases"]["maxItems"] == 32
    assert {"said_at", "status", "decided_at", "fact_id"} <= set(
        schemas["CandidateOut"]["properties"]
    )


# --- one user's key, another user's candidates and names -----------------------------------


@pytest.fixture
async def keyed_app(
    service_settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, AsyncMemory]]:
    app = create_app(service_settings.model_copy(update=LOW_BAR))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://memstack") as client:
            yield client, app.state.memory


async def test_a_user_key_reaches_only_its_own_candidates_and_names(
    keyed_app: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, mem = keyed_app
    alice, bob = new_id("al"), new_id("bob")
    _, alice_key = await mem.create_key(alice)
    _, bob_key = await mem.create_key(bob)
    await mem.remember(alice, "s1", "user", "I live in Porto.")
    await mem.remember(bob, "s1", "user", "I am vegetarian.")
    await mem.drain()
    await mem.set_identity(alice, display_name="Alice")
    [porto] = await mem.candidates(alice)
    as_bob = bearer(bob_key)

    refused = [
        ("GET", f"/v1/users/{alice}/candidates", None),
        ("GET", f"/v1/users/{alice}/candidates?status=all", None),
        ("POST", f"/v1/users/{alice}/candidates/{porto.id}/confirm", None),
        ("POST", f"/v1/users/{alice}/candidates/{porto.id}/reject", None),
        ("GET", f"/v1/users/{alice}/identity", None),
        ("PUT", f"/v1/users/{alice}/identity", {"display_name": "Bob"}),
    ]
    for method, path, body in refused:
        r = await client.request(method, path, json=body, headers=as_bob)
        assert r.status_code == 403, (method, path, r.text)
        assert "Porto" not in r.text and "Alice" not in r.text
    # Alice's candidate id through bob's own path names none of bob's.
    for decision in ("confirm", "reject"):
        r = await client.post(f"/v1/users/{bob}/candidates/{porto.id}/{decision}", headers=as_bob)
        assert r.status_code == 404 and r.json()["error"] == "NotFound", r.text
        assert "Porto" not in r.text
    own = await client.get(f"/v1/users/{bob}/candidates?status=all", headers=as_bob)
    assert own.status_code == 200 and "Porto" not in own.text
    assert [c["value"] for c in own.json()["candidates"]] == ["vegetarian"]
    r = await client.put(f"/v1/users/{bob}/identity", json={"aliases": ["B"]}, headers=as_bob)
    assert r.status_code == 200 and r.json()["aliases"] == ["B"]

    # Nothing of alice's changed; her own key decides her candidate.
    assert await mem.candidates(alice) == [porto]
    assert await mem.facts(alice) == [] and await mem.facts(bob) == []
    assert (await mem.identity(alice)).display_name == "Alice"
    mine = await client.post(
        f"/v1/users/{alice}/candidates/{porto.id}/confirm", headers=bearer(alice_key)
    )
    assert mine.status_code == 200 and mine.json()["candidate_id"] == porto.id
    assert [(f.key, f.value) for f in await mem.facts(alice)] == [("city", "Porto")]
    assert [c.status for c in await mem.candidates(bob)] == ["pending"]
