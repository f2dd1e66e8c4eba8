"""Erasing a user revokes every API key bound to that user, in the same transaction as
the erasure: through the library, the HTTP API, the client, MCP and the CLI, each
reporting the revoked keys by id (never a secret), while other users' keys keep working."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from memstack import AsyncMemory, Memory, UserErasure
from memstack.cli import app as cli_app
from memstack.client import AsyncMemoryClient
from memstack.core.settings import Settings, load_settings
from memstack.server.http import create_app
from tests.conftest import new_id
from tests.test_api import serve
from tests.test_mcp import connect, ok


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_forget_user_revokes_the_users_keys_and_lists_them(mem: AsyncMemory) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    await mem.remember(alice, "s1", "user", "I live in Lisbon.")
    key, secret = await mem.create_key(alice)
    writer, writer_secret = await mem.create_key(alice, scopes=["kb:write"])
    old, _ = await mem.create_key(alice)
    await mem.revoke_key(old.key_id)
    bobs, bob_secret = await mem.create_key(bob)
    admin, admin_secret = await mem.create_key(admin=True)

    erased = await mem.forget_user(alice)
    assert isinstance(erased, UserErasure)
    assert erased.revoked_keys == tuple(sorted([key.key_id, writer.key_id]))
    assert erased["api_keys"] == 2 and erased["messages"] == 0  # the job was still queued
    assert secret not in repr(erased) and writer_secret not in repr(erased)
    assert await mem.authenticate(secret) is None
    assert await mem.authenticate(writer_secret) is None
    assert await mem.authenticate(bob_secret) == bobs
    assert await mem.authenticate(admin_secret) == admin
    listed = {k.key_id: k for k in await mem.list_keys()}
    assert listed[key.key_id].revoked and listed[writer.key_id].revoked
    assert not listed[bobs.key_id].revoked
    # Erasing again finds nothing left to revoke.
    assert (await mem.forget_user(alice)).revoked_keys == ()


@pytest.mark.parametrize("erased_by", ["admin", "own key"])
async def test_a_key_answers_before_the_erasure_and_is_refused_after(
    any_settings: Settings, erased_by: str
) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    async with serve(any_settings) as (client, mem):
        key, secret = await mem.create_key(alice)
        bobs, bob_secret = await mem.create_key(bob)
        _, admin_secret = await mem.create_key(admin=True)
        facts = f"/v1/users/{alice}/facts"
        assert (await client.get(facts, headers=bearer(secret))).status_code == 200

        by = admin_secret if erased_by == "admin" else secret
        r = await client.delete(f"/v1/users/{alice}", headers=bearer(by))
        assert r.status_code == 200, r.text
        assert r.json()["revoked_keys"] == [key.key_id]
        assert r.json()["deleted"]["api_keys"] == 1 and secret not in r.text

        for method, path in (("GET", facts), ("POST", f"/v1/users/{alice}/sessions/s1/context")):
            after = await client.request(
                method, path, headers=bearer(secret), json={"query": "where?"}
            )
            assert after.status_code == 401, (path, after.text)
            assert after.json()["error"] == "Unauthorized"
        # Nothing of the erased user can be written back with the key either.
        msg = {"role": "user", "content": "I am back."}
        url = f"/v1/users/{alice}/sessions/s1/messages"
        assert (await client.post(url, json=msg, headers=bearer(secret))).status_code == 401
        assert (await mem.window(alice, "s1")) == []
        # Bob's key still reaches Bob's memory, and only his.
        own = await client.get(f"/v1/users/{bob}/facts", headers=bearer(bob_secret))
        assert own.status_code == 200
        other = await client.get(facts, headers=bearer(bob_secret))
        assert other.status_code == 403
        assert await mem.authenticate(bob_secret) == bobs


async def test_the_client_and_mcp_report_the_revoked_keys(service_settings: Settings) -> None:
    alice, carol = new_id("alice"), new_id("carol")
    app = create_app(service_settings)
    async with app.router.lifespan_context(app):
        mem: AsyncMemory = app.state.memory
        transport = httpx.ASGITransport(app=app)
        key, secret = await mem.create_key(alice)
        async with AsyncMemoryClient(
            "http://memstack", api_key=secret, transport=transport
        ) as client:
            erased = await client.forget_user(alice)
        assert isinstance(erased, UserErasure) and erased.revoked_keys == (key.key_id,)
        assert erased["api_keys"] == 1 and await mem.authenticate(secret) is None

    async with connect(service_settings) as mcp, await AsyncMemory.open(service_settings) as mem:
        carols, carol_secret = await mem.create_key(carol)
        result = await ok(mcp, "forget_user", user_id=carol)
        assert result["revoked_keys"] == [carols.key_id]
        assert result["deleted"]["api_keys"] == 1
        # The MCP server's memory is another object: this one never read the key, so it
        # reads the revocation from the database.
        assert await mem.authenticate(carol_secret) is None


def test_the_cli_lists_the_revoked_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    settings = load_settings(home=tmp_path / "home", embedder="hashing")
    with Memory(settings) as mem:
        key, secret = mem.create_key("alice")
    result = CliRunner().invoke(cli_app, ["forget-user", "alice", "--yes"])
    assert result.exit_code == 0, result.output
    assert "api_keys 1" in result.output and f"revoked API keys: {key.key_id}" in result.output
    assert secret.removeprefix(f"msk_{key.key_id}_") not in result.output
    with Memory(settings) as mem:
        assert mem.authenticate(secret) is None
