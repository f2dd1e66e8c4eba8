"""API keys: the library verbs, the HTTP guard's access rules for every route class and
credential, refusal before the body is read, the cache, and the ``memstack keys`` CLI."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import event, text
from typer.testing import CliRunner

from memstack import ApiKey, AsyncMemory, Memory, NotFound, StoreUnavailable, ValidationError
from memstack.cli import app as cli_app
from memstack.core.settings import Settings, load_settings
from memstack.server.http import create_app
from memstack.verbs import keys as access_module
from tests.conftest import new_id, new_prefix
from tests.test_api import serve
from tests.test_api_limits import raw_call

TOKEN = "keys-token-0123456789abcdef"


def bearer(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


async def stored_rows(mem: AsyncMemory) -> list[dict[str, Any]]:
    async with mem.engine.connect() as conn:
        rows = await conn.execute(text("SELECT * FROM memory_api_key"))
        return [dict(r._mapping) for r in rows]


# --- the library ----------------------------------------------------------------------------


async def test_keys_are_created_checked_listed_and_revoked(mem: AsyncMemory) -> None:
    user = new_id("u")
    key, secret = await mem.create_key(user)
    admin, admin_secret = await mem.create_key(admin=True)
    writer, _ = await mem.create_key(user, scopes=["kb:write"])
    assert secret.startswith(f"msk_{key.key_id}_") and len(secret) > 50
    assert (key.user_id, key.admin, key.scopes, key.revoked) == (user, False, frozenset(), False)
    assert admin.admin and admin.user_id is None and writer.scopes == {"kb:write"}

    assert await mem.authenticate(secret) == key
    assert await mem.authenticate(admin_secret) == admin
    assert await mem.has_keys()
    wrong_secret = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    for bad in (wrong_secret, f"msk_{'0' * 16}_{'x' * 43}", "msk_", "", "Bearer x", secret + " "):
        assert await mem.authenticate(bad) is None, bad

    listed = await mem.list_keys()
    assert {k.key_id for k in listed} == {key.key_id, admin.key_id, writer.key_id}
    revoked = await mem.revoke_key(key.key_id)
    assert revoked.revoked and revoked.key_id == key.key_id
    assert await mem.authenticate(secret) is None  # at once in this process
    again = await mem.revoke_key(key.key_id)
    assert again.revoked_at == revoked.revoked_at  # revoking twice changes nothing
    with pytest.raises(NotFound):
        await mem.revoke_key("0123456789abcdef")
    with pytest.raises(ValidationError):
        await mem.revoke_key("not-a-key-id")
    await mem.revoke_key(admin.key_id)
    assert await mem.has_keys()  # the writer key is still live
    await mem.revoke_key(writer.key_id)
    assert not await mem.has_keys()

    # Only a SHA-256 of each secret is stored: no column holds the secret or the key.
    rows = await stored_rows(mem)
    row = next(r for r in rows if r["key_id"] == key.key_id)
    raw = secret.removeprefix(f"msk_{key.key_id}_")
    assert row["secret_sha256"] == hashlib.sha256(raw.encode()).hexdigest()
    assert not any(raw in str(v) for r in rows for v in r.values())


@pytest.mark.parametrize(
    "args",
    [
        {},  # neither a user nor admin
        {"user_id": "alice", "admin": True},
        {"admin": True, "scopes": ["kb:write"]},
        {"user_id": "alice", "scopes": ["kb:admin"]},
        {"user_id": "alice", "scopes": "kb:write"},
        {"user_id": "a/b"},
        {"user_id": ".."},
        {"user_id": "x" * 200},
    ],
)
async def test_a_bad_key_request_is_refused_and_stores_nothing(
    embedded_settings: Settings, args: dict[str, Any]
) -> None:
    async with await AsyncMemory.open(embedded_settings) as mem:
        with pytest.raises(ValidationError):
            await mem.create_key(**args)
        assert await mem.list_keys() == [] and not await mem.has_keys()


async def test_deployments_sharing_a_database_keep_their_keys_apart(
    service_settings: Settings,
) -> None:
    other = service_settings.model_copy(update={"key_prefix": new_prefix()})
    async with (
        await AsyncMemory.open(service_settings) as one,
        await AsyncMemory.open(other) as two,
    ):
        _, secret = await one.create_key("alice")
        assert await one.has_keys() and await one.authenticate(secret) is not None
        assert not await two.has_keys() and await two.list_keys() == []
        assert await two.authenticate(secret) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def test_lookups_are_cached_for_two_seconds_and_a_revocation_elsewhere_is_seen_after(
    service_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(access_module, "time", SimpleNamespace(monotonic=clock.monotonic))
    async with (
        await AsyncMemory.open(service_settings) as server,
        await AsyncMemory.open(service_settings) as elsewhere,
    ):
        key, secret = await elsewhere.create_key("alice")
        queries: list[str] = []

        def count(*args: Any) -> None:
            if "memory_api_key" in args[2]:
                queries.append(args[2])

        event.listen(server.engine.sync_engine, "before_cursor_execute", count)
        for _ in range(50):
            assert await server.has_keys()
            assert await server.authenticate(secret) == key
        assert len(queries) == 2  # one for "any key?", one for the key

        await elsewhere.revoke_key(key.key_id)
        clock.now += 1.9
        assert await server.authenticate(secret) == key  # within the documented delay
        clock.now += 0.2
        assert await server.authenticate(secret) is None
        assert await server.has_keys() is False

        # While the database cannot be read, the last answers stand; a key never read fails.
        async def down(*_: Any) -> None:
            raise StoreUnavailable("database unavailable (api keys)", layer="database")

        monkeypatch.setattr(access_module.api_keys, "find", down)
        monkeypatch.setattr(access_module.api_keys, "any_live", down)
        clock.now += 10
        assert await server.authenticate(secret) is None and await server.has_keys() is False
        with pytest.raises(StoreUnavailable):
            await server.authenticate(f"msk_{'a' * 16}_{'b' * 43}")


# --- HTTP: every route class against every credential -----------------------------------------

# (class, method, path, body); {u} is the owner, {o} another user.
REQUESTS: list[tuple[str, str, str, Any]] = [
    ("own", "POST", "/v1/users/{u}/sessions/s1/messages", {"role": "user", "content": "hi"}),
    ("own", "GET", "/v1/users/{u}/sessions/s1/ledger", None),
    ("own", "GET", "/v1/users/{u}/facts", None),
    ("own", "PATCH", "/v1/users/{u}/sessions/s1/state", {"step": 1}),
    ("other", "POST", "/v1/users/{o}/sessions/s1/messages", {"role": "user", "content": "hi"}),
    ("other", "GET", "/v1/users/{o}/sessions", None),
    ("other", "GET", "/v1/users/{o}/facts/history", None),
    ("other", "DELETE", "/v1/users/{o}", None),
    ("users", "GET", "/v1/users", None),
    ("kb-read", "POST", "/v1/knowledge/search", {"query": "ferries"}),
    ("kb-read", "GET", "/v1/knowledge/documents", None),
    ("kb-write", "POST", "/v1/knowledge/documents", {"documents": [{"text": "Ferries run."}]}),
    ("kb-write", "DELETE", "/v1/knowledge/documents/nothing-here", None),
    ("admin", "POST", "/v1/admin/drain", None),
    ("unknown", "GET", "/v1/no/such/route", None),
]
REFUSED = {"none", "malformed", "wrong", "revoked"}
USER_MAY = {"own", "kb-read"}


def expected(credential: str, route_class: str, with_token: bool) -> int | None:
    """401, 403, or None (allowed: the route answers as it would without keys)."""
    if credential in REFUSED or (credential == "token" and not with_token):
        return 401
    if credential in ("admin", "token"):
        return None
    granted = USER_MAY | ({"kb-write"} if credential == "writer" else set())
    return None if route_class in granted else 403


@pytest.mark.parametrize("with_token", [False, True], ids=["keys", "keys+token"])
async def test_every_route_class_with_every_credential(
    service_settings: Settings, with_token: bool
) -> None:
    settings = service_settings
    if with_token:
        settings = settings.model_copy(update={"api_token": SecretStr(TOKEN)})
    owner, other = new_id("u"), new_id("u")
    async with serve(settings) as (client, mem):
        _, user_key = await mem.create_key(owner)
        _, writer_key = await mem.create_key(owner, scopes=["kb:write"])
        _, admin_key = await mem.create_key(admin=True)
        revoked, revoked_key = await mem.create_key(owner)
        await mem.revoke_key(revoked.key_id)
        credentials = {
            "none": None,
            "malformed": "msk_nope",
            "wrong": user_key[:-3] + ("xyz" if not user_key.endswith("xyz") else "abc"),
            "revoked": revoked_key,
            "user": user_key,
            "writer": writer_key,
            "admin": admin_key,
            "token": TOKEN,
        }
        for name, key in credentials.items():
            for route_class, method, template, body in REQUESTS:
                path = template.format(u=owner, o=other)
                r = await client.request(method, path, json=body, headers=bearer(key))
                want = expected(name, route_class, with_token)
                where = (name, method, path, r.status_code, r.text)
                if want is None:
                    assert r.status_code not in (401, 403) and r.status_code < 500, where
                else:
                    assert r.status_code == want, where
                    assert set(r.json()) == {"error", "detail"}, where
                    assert r.json()["error"] == ("Unauthorized" if want == 401 else "Forbidden")
                    if want == 401:
                        assert r.headers["www-authenticate"] == "Bearer"
        # A user key may erase its own user, and only that.
        mine = await client.delete(f"/v1/users/{owner}", headers=bearer(user_key))
        assert mine.status_code == 200 and mine.json()["deleted"]["messages"] >= 0


async def test_the_api_is_open_until_a_key_exists_and_again_when_all_are_revoked(
    any_settings: Settings,
) -> None:
    user = new_id("u")
    url = f"/v1/users/{user}/sessions/s1/messages"
    msg = {"role": "user", "content": "hi"}
    async with serve(any_settings) as (client, mem):
        assert (await client.post(url, json=msg)).status_code == 201
        key, secret = await mem.create_key(user)
        closed = await client.post(url, json=msg)
        assert closed.status_code == 401 and closed.json()["detail"] == (
            "missing or wrong bearer token"
        )
        assert (await client.post(url, json=msg, headers=bearer(secret))).status_code == 201
        await mem.revoke_key(key.key_id)
        assert (await client.post(url, json=msg, headers=bearer(secret))).status_code == 201
        assert (await client.post(url, json=msg)).status_code == 201
        # Probes and the API's description never need a key.
        await mem.create_key(admin=True)
        for path in ("/healthz", "/metrics", "/openapi.json", "/docs"):
            assert (await client.get(path)).status_code == 200, path


async def test_the_openapi_document_declares_the_bearer_scheme_without_a_token(
    embedded_settings: Settings,
) -> None:
    doc = create_app(embedded_settings).openapi()
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            declared = path.startswith("/v1/")
            assert (operation.get("security") == [{"HTTPBearer": []}]) is declared, path


# --- refused before the body is read ------------------------------------------------------------


@pytest.fixture
async def keyed(
    service_settings: Settings,
) -> AsyncIterator[tuple[Any, httpx.AsyncClient, AsyncMemory]]:
    settings = service_settings.model_copy(update={"max_body_bytes": 4096})
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://memstack") as c:
            yield app, c, app.state.memory


async def test_no_key_a_wrong_or_revoked_key_is_401_before_the_body_is_read(
    keyed: tuple[Any, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, _, mem = keyed
    alice, bob = new_id("al"), new_id("bob")
    _, alice_key = await mem.create_key(alice)
    gone, gone_key = await mem.create_key(alice)
    await mem.revoke_key(gone.key_id)
    url = f"/v1/users/{alice}/sessions/s1/messages"
    huge = {"content-type": "application/json", "content-length": "50000000"}
    for headers in ({}, bearer("msk_x"), bearer(alice_key + "x"), bearer(gone_key)):
        for body in ([b"x" * 5000], [b"{not json"]):
            status, got, answer, pulled = await raw_call(
                app, "POST", url, {**headers, **huge}, body
            )
            assert (status, pulled) == (401, 0), (headers, answer)
            assert got["www-authenticate"] == "Bearer" and got["connection"] == "close"
    # Another user's path is 403, also unread, whatever the body.
    other = f"/v1/users/{bob}/sessions/s1/messages"
    status, _, answer, pulled = await raw_call(
        app, "POST", other, {**bearer(alice_key), **huge}, [b"{not json"]
    )
    assert (status, pulled) == (403, 0) and b'"error": "Forbidden"' in answer
    # Past the key, the body limit applies as before.
    status, _, _, pulled = await raw_call(app, "POST", url, {**bearer(alice_key), **huge}, [b"x"])
    assert (status, pulled) == (413, 0)
    assert await mem.window(alice, "s1") == [] and await mem.window(bob, "s1") == []


async def test_keys_that_cannot_be_read_are_503_not_an_open_door(
    keyed: tuple[Any, httpx.AsyncClient, AsyncMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client, mem = keyed
    _, key = await mem.create_key("alice")

    async def down(_: str) -> ApiKey | None:
        raise StoreUnavailable("database unavailable (api keys)", layer="database")

    monkeypatch.setattr(mem, "authenticate", down)
    r = await client.get("/v1/users/alice/facts", headers=bearer(key))
    assert r.status_code == 503
    assert r.json() == {"error": "StoreUnavailable", "detail": "database unavailable"}


# --- the CLI ------------------------------------------------------------------------------------

runner = CliRunner()


def test_keys_create_list_revoke_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    made = runner.invoke(cli_app, ["keys", "create", "--user", "alice", "--kb-write"])
    assert made.exit_code == 0, made.output
    key = made.output.strip().splitlines()[-1]
    key_id, secret = key.removeprefix("msk_").split("_", 1)
    assert key.startswith("msk_") and key_id in made.output.splitlines()[0]
    assert made.output.count(secret) == 1  # shown once
    admin = runner.invoke(cli_app, ["keys", "create", "--admin"])
    assert admin.exit_code == 0 and "admin key" in admin.output

    listed = runner.invoke(cli_app, ["keys", "list"])
    assert listed.exit_code == 0, listed.output
    assert key_id in listed.output and "alice" in listed.output and "kb:write" in listed.output
    assert "(admin key)" in listed.output and secret not in listed.output

    with sqlite3.connect(tmp_path / "home" / "memstack.db") as db:
        rows = db.execute("SELECT * FROM memory_api_key").fetchall()
    assert len(rows) == 2 and not any(secret in str(v) for row in rows for v in row)
    assert hashlib.sha256(secret.encode()).hexdigest() in {v for row in rows for v in row}

    gone = runner.invoke(cli_app, ["keys", "revoke", key_id])
    assert gone.exit_code == 0 and f"revoked {key_id}" in gone.output
    listed = runner.invoke(cli_app, ["keys", "list"])
    revoked_line = next(line for line in listed.output.splitlines() if key_id in line)
    assert len(re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d", revoked_line)) == 2  # created, revoked
    with Memory(load_settings(home=tmp_path / "home", embedder="hashing")) as mem:
        assert mem.authenticate(key) is None
        assert [k.user_id for k in mem.list_keys() if not k.revoked] == [None]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["keys", "create"], 2),
        (["keys", "create", "--user", "alice", "--admin"], 2),
        (["keys", "create", "--admin", "--kb-write"], 1),
        (["keys", "create", "--user", "a b"], 1),
        (["keys", "revoke", "0123456789abcdef"], 1),
    ],
)
def test_bad_key_commands_fail_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int
) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    result = runner.invoke(cli_app, args)
    assert result.exit_code == code, result.output
    assert result.output.startswith("error:") and "Traceback" not in result.output
