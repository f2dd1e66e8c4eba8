"""Fact candidates and the user's names through the other entry points: the Python
client against a live ``memstack serve``, the MCP tools (pinned to a user too) and the
command line, each answering what the library answers.

As in tests/test_candidates_entry.py, MEMSTACK_FACT_MIN_CONFIDENCE=1.0 makes every
extracted fact a candidate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from mcp import Client

from memstack import (
    AsyncMemory,
    Conflict,
    InvalidContent,
    InvalidId,
    NotFound,
    Settings,
    StoredCandidate,
    StoredFact,
    UserIdentity,
    ValidationError,
)
from memstack.cli import app
from memstack.server.mcp import create_server
from tests.conftest import make_settings, new_id
from tests.test_candidates_entry import LOW_BAR
from tests.test_cli import runner
from tests.test_client import TOKEN, Server, client_of, do, serve
from tests.test_mcp import call, connect, ok, tell, text_of


@pytest.fixture
def low_bar(any_settings: Settings) -> Settings:
    return any_settings.model_copy(update=LOW_BAR)


# --- the Python client -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def low_server(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, pg_url: str
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("candidates-client")
    settings = make_settings(
        root / "library",
        redis_url=redis_url,
        database_url=pg_url,
        auto_migrate=False,
        **LOW_BAR,
    )
    env = {
        "MEMSTACK_REDIS_URL": redis_url,
        "MEMSTACK_DATABASE_URL": pg_url,
        "MEMSTACK_KEY_PREFIX": settings.key_prefix,
        "MEMSTACK_EMBEDDER": "hashing",
        "MEMSTACK_AUTO_MIGRATE": "false",
        "MEMSTACK_HOME": str(root / "server" / "home"),
        "MEMSTACK_API_TOKEN": TOKEN,
        "MEMSTACK_FACT_MIN_CONFIDENCE": "1.0",
    }
    with serve(root / "server", env) as url:
        yield Server(url, settings)


@pytest.fixture
async def library(low_server: Server) -> AsyncIterator[AsyncMemory]:
    mem = await AsyncMemory.open(low_server.settings)
    yield mem
    keys = [k async for k in mem.working.redis.scan_iter(match=mem.working.keys.pattern())]
    if keys:
        await mem.working.redis.delete(*keys)
    await mem.close()


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_candidates_and_names_through_the_client(
    kind: str, low_server: Server, library: AsyncMemory
) -> None:
    user, other = new_id("u"), new_id("u")
    async with client_of(kind, low_server.url, api_key=TOKEN) as c:
        await do(c.remember, user, "s1", "user", "I live in Porto.")
        await do(c.remember, user, "s1", "user", "I am vegetarian.")
        await do(c.remember, other, "s1", "user", "I live in Oslo.")
        await do(c.drain)

        pending = await do(c.candidates, user)
        assert pending == await library.candidates(user)
        assert all(isinstance(x, StoredCandidate) for x in pending)
        assert [(x.key, x.status) for x in pending] == [("diet", "pending"), ("city", "pending")]
        assert pending[0].said_at.utcoffset() is not None
        diet, city = pending
        assert await do(c.candidates, user, key="city") == [city]
        moment = datetime.now(UTC)

        fact = await do(c.confirm_candidate, user, city.id)
        assert isinstance(fact, StoredFact) and fact.candidate_id == city.id
        assert await do(c.facts, user) == await library.facts(user) == [fact]
        rejected = await do(c.reject_candidate, user, diet.id)
        assert isinstance(rejected, StoredCandidate) and rejected.status == "rejected"
        assert rejected == (await library.candidates(user, key="diet", status="all"))[0]
        # Those pending then, as they are now.
        then = await do(c.candidates, user, as_of=moment)
        assert then == await library.candidates(user, as_of=moment)
        assert [(x.id, x.status) for x in then] == [(diet.id, "rejected"), (city.id, "confirmed")]
        assert await do(c.candidates, user, status="all") == await library.candidates(
            user, status="all"
        )

        with pytest.raises(Conflict, match="pending"):
            await do(c.confirm_candidate, user, diet.id)
        [oslo] = await library.candidates(other)
        with pytest.raises(NotFound):
            await do(c.reject_candidate, user, oslo.id)
        for bad in (0, -3, True, "1", 2**63):
            with pytest.raises(ValidationError, match="candidate_id"):
                await do(c.confirm_candidate, user, bad)
        with pytest.raises(ValidationError, match="status"):
            await do(c.candidates, user, status="bogus")
        with pytest.raises(ValidationError, match="status"):
            await do(c.candidates, user, status=None)
        with pytest.raises(ValidationError, match="as_of"):
            await do(c.candidates, user, status="all", as_of=moment)
        with pytest.raises(InvalidId):
            await do(c.candidates, user, key="no spaces")
        assert [x.status for x in await library.candidates(other)] == ["pending"]

        assert await do(c.identity, user) == UserIdentity(user)
        bound = await do(c.set_identity, user, display_name=" Ann ", aliases=["Annie"])
        assert bound == UserIdentity(user, "Ann", ("Annie",)) == await library.identity(user)
        assert await do(c.identity, user) == bound
        with pytest.raises(InvalidContent, match="':'"):
            await do(c.set_identity, user, aliases=["a:b"])
        with pytest.raises(ValidationError, match="twice"):
            await do(c.set_identity, user, display_name="ann", aliases=["ANN"])
        with pytest.raises(ValidationError, match="list of names"):
            await do(c.set_identity, user, aliases="Annie")
        with pytest.raises(NotFound):
            await do(c.identity, new_id("nobody"))
        with pytest.raises(NotFound):
            await do(c.set_identity, new_id("nobody"), display_name="Ann")
        assert await library.identity(user) == bound
        assert await do(c.identity, other) == UserIdentity(other)

        await do(c.forget_user, user)
        await do(c.forget_user, other)


# --- MCP -----------------------------------------------------------------------------------


async def test_candidate_and_name_tools(low_bar: Settings) -> None:
    user, other = new_id("u"), new_id("u")
    async with connect(low_bar, inline_ingest=True) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("candidates", "identity"):
            hints = tools[name].annotations
            assert hints is not None and hints.read_only_hint, name
        for name in ("confirm_candidate", "reject_candidate", "set_identity"):
            hints = tools[name].annotations
            assert hints is not None and not hints.read_only_hint, name
            assert hints.destructive_hint is False, name
        for name in ("candidates", "confirm_candidate", "reject_candidate", "set_identity"):
            assert next(iter(tools[name].input_schema["properties"])) == "user_id"
            assert "ctx" not in tools[name].input_schema["properties"]

        await tell(client, user, "s1", "I live in Porto.", "Nice.", "I am vegetarian.")
        await tell(client, other, "s1", "I live in Oslo.")
        pending = (await ok(client, "candidates", user_id=user))["candidates"]
        assert [(x["key"], x["status"]) for x in pending] == [
            ("diet", "pending"),
            ("city", "pending"),
        ]
        diet, city = pending
        assert (await ok(client, "facts", user_id=user))["facts"] == []

        fact = await ok(client, "confirm_candidate", user_id=user, candidate_id=city["id"])
        assert (fact["key"], fact["value"], fact["candidate_id"]) == ("city", "Porto", city["id"])
        rejected = await ok(client, "reject_candidate", user_id=user, candidate_id=diet["id"])
        assert rejected["status"] == "rejected"
        again = await call(client, "confirm_candidate", user_id=user, candidate_id=diet["id"])
        assert again.is_error and "Conflict" in text_of(again)
        [oslo] = (await ok(client, "candidates", user_id=other))["candidates"]
        theirs = await call(client, "confirm_candidate", user_id=user, candidate_id=oslo["id"])
        assert theirs.is_error and "NotFound" in text_of(theirs)
        zero = await call(client, "reject_candidate", user_id=user, candidate_id=0)
        assert zero.is_error
        bad = await call(
            client, "candidates", user_id=user, status="all", as_of="2025-01-01T00:00:00Z"
        )
        assert bad.is_error and "as_of" in text_of(bad)
        every = (await ok(client, "candidates", user_id=user, status="all"))["candidates"]
        assert {x["id"]: x["status"] for x in every} == {
            city["id"]: "confirmed",
            diet["id"]: "rejected",
        }

        assert await ok(client, "identity", user_id=user) == {
            "user_id": user,
            "display_name": None,
            "aliases": [],
        }
        bound = await ok(client, "set_identity", user_id=user, display_name="Ann", aliases=["A."])
        assert bound == {"user_id": user, "display_name": "Ann", "aliases": ["A."]}
        refused = await call(client, "set_identity", user_id=user, aliases=["x", "X"])
        assert refused.is_error and "twice" in text_of(refused)
        unknown = await call(client, "identity", user_id=new_id("nobody"))
        assert unknown.is_error and "NotFound" in text_of(unknown)
        assert (await ok(client, "identity", user_id=user))["display_name"] == "Ann"
        assert [
            x["status"] for x in (await ok(client, "candidates", user_id=other))["candidates"]
        ] == ["pending"]


async def test_pinned_candidate_tools_reach_the_pinned_user_only(low_bar: Settings) -> None:
    alice, bob = new_id("al"), new_id("bob")
    async with await AsyncMemory.open(low_bar) as mem:
        await mem.remember(bob, "s1", "user", "I live in Oslo.")
        await mem.drain()
        [oslo] = await mem.candidates(bob)
    server = create_server(low_bar, user_id=alice, inline_ingest=True)
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        names = ("candidates", "confirm_candidate", "reject_candidate", "identity", "set_identity")
        assert set(names) <= set(tools)  # none is destructive: offered without --allow-forget
        assert all("user_id" not in tools[n].input_schema["properties"] for n in names)

        await ok(client, "remember", session_id="s1", role="user", content="I live in Porto.")
        mine = (await ok(client, "candidates", user_id=bob))["candidates"]
        assert [(x["user_id"], x["value"]) for x in mine] == [(alice, "Porto")]
        for tool in ("confirm_candidate", "reject_candidate"):
            r = await call(client, tool, user_id=bob, candidate_id=oslo.id)
            assert r.is_error and "NotFound" in text_of(r), tool
        named = await ok(client, "set_identity", user_id=bob, display_name="Al")
        assert named["user_id"] == alice
        fact = await ok(client, "confirm_candidate", candidate_id=mine[0]["id"])
        assert (fact["user_id"], fact["value"]) == (alice, "Porto")
    async with await AsyncMemory.open(low_bar) as mem:
        assert await mem.candidates(bob) == [oslo]
        assert await mem.facts(bob) == []
        assert await mem.identity(bob) == UserIdentity(bob)
        assert (await mem.identity(alice)).display_name == "Al"


# --- the command line --------------------------------------------------------------------------


def test_cli_reviews_candidates_and_binds_names(
    low_bar: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "MEMSTACK_HOME": str(low_bar.home),
        "MEMSTACK_KEY_PREFIX": low_bar.key_prefix,
        "MEMSTACK_EMBEDDER": "hashing",
        "MEMSTACK_FACT_MIN_CONFIDENCE": "1.0",
        "MEMSTACK_AUTO_MIGRATE": None if low_bar.auto_migrate is None else "false",
        "MEMSTACK_REDIS_URL": low_bar.redis_url,
        "MEMSTACK_DATABASE_URL": low_bar.database_url,
        "COLUMNS": "400",
    }
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    user, other = new_id("u"), new_id("u")

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, result.output
        return result.output

    async def seed() -> tuple[list[StoredCandidate], StoredCandidate]:
        async with await AsyncMemory.open(low_bar) as mem:
            await mem.remember(user, "s1", "user", "I live in Porto.")
            await mem.remember(user, "s1", "user", "I am vegetarian.")
            await mem.remember(other, "s1", "user", "I live in Oslo.")
            await mem.drain()
            [oslo] = await mem.candidates(other)
            return await mem.candidates(user), oslo

    (diet, city), oslo = asyncio.run(seed())
    listing = run("facts", "candidates", user)
    assert "Porto" in listing and "vegetarian" in listing and "Oslo" not in listing
    assert "Porto" not in run("facts", user)  # never served while pending
    assert "vegetarian" not in run("facts", "candidates", user, "--key", "city")
    confirmed = run("facts", "confirm", user, str(city.id))
    assert "Porto" in confirmed and f"candidate {city.id}" in confirmed
    assert "Porto" in run("facts", user)
    assert "rejected" in run("facts", "reject", user, str(diet.id))
    assert "pending" in run("facts", "confirm", user, str(diet.id), code=1)
    assert "no fact candidate" in run("facts", "reject", user, str(oslo.id), code=1)
    assert "candidate_id" in run("facts", "confirm", user, "0", code=1)
    run("facts", "confirm", user, "x", code=2)
    every = run("facts", "candidates", user, "--status", "all")
    assert "confirmed" in every and "rejected" in every
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    assert "Porto" not in run("facts", "candidates", user, "--as-of", past)
    assert "status" in run("facts", "candidates", user, "--status", "bogus", code=1)
    assert "as_of" in run("facts", "candidates", user, "--status", "all", "--as-of", past, code=1)

    assert "display name: (none)" in run("identity", user)
    shown = run("identity", "set", user, "--name", "Ann Lee", "--alias", "Annie", "--alias", "AL")
    assert "display name: Ann Lee" in shown and "aliases: Annie, AL" in shown
    assert "aliases: Annie, AL" in run("identity", "show", user)
    assert "':'" in run("identity", "set", user, "--alias", "a:b", code=1)
    assert "twice" in run("identity", "set", user, "--alias", "x", "--alias", "X", code=1)
    assert "no memory yet" in run("identity", new_id("nobody"), code=1)
    assert "aliases: Annie, AL" in run("identity", user)
    assert "display name: (none)" in run("identity", other)
    assert "aliases: (none)" in run("identity", "set", user)  # no option unbinds them

    assert "candidates 2" in run("forget-user", user, "--yes")
    assert "Oslo" in run("facts", "candidates", other)
    run("forget-user", other, "--yes")
