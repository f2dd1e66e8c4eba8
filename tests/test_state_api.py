"""Task state over the API: PATCH answers exactly what GET answers, and ``null`` deletes a
field (in the library, over HTTP and through the client), while a bad PATCH changes
nothing."""

from __future__ import annotations

import httpx

from memstack import AsyncMemory
from memstack.client import AsyncMemoryClient
from memstack.core.settings import Settings
from memstack.server.http import create_app
from tests.conftest import new_id
from tests.test_api import serve


async def test_patch_answers_as_get_and_null_deletes_a_field(any_settings: Settings) -> None:
    user, session = new_id("u"), new_id("s")
    url = f"/v1/users/{user}/sessions/{session}/state"
    async with serve(any_settings) as (client, mem):
        await mem.remember(user, session, "user", "Book me a table.")
        patched = await client.patch(url, json={"step": 2, "plan": {"a": [1, 2]}, "note": "x"})
        assert patched.status_code == 200, patched.text
        got = await client.get(url)
        assert patched.json() == got.json()
        assert got.json()["fields"] == {"step": 2, "plan": {"a": [1, 2]}, "note": "x"}
        assert got.json()["turns"] == 1

        dropped = await client.patch(url, json={"plan": None, "step": 3, "never-set": None})
        assert dropped.status_code == 200, dropped.text
        assert dropped.json()["fields"] == {"step": 3, "note": "x"}
        assert dropped.json() == (await client.get(url)).json()
        # Only deletions: the counters stay, the fields go.
        emptied = await client.patch(url, json={"step": None, "note": None})
        assert emptied.json()["fields"] == {} and emptied.json()["turns"] == 1
        assert emptied.json() == (await client.get(url)).json()

        # A bad field name refuses the whole PATCH: the null beside it deletes nothing.
        await client.patch(url, json={"keep": True})
        bad = await client.patch(url, json={"keep": None, "_turns": None})
        assert bad.status_code == 422 and "_turns" in bad.text
        assert (await client.get(url)).json()["fields"] == {"keep": True}


async def test_the_library_and_the_client_delete_a_field_given_none(
    service_settings: Settings,
) -> None:
    user, session = new_id("u"), new_id("s")
    app = create_app(service_settings)
    async with app.router.lifespan_context(app):
        mem: AsyncMemory = app.state.memory
        await mem.set_state(user, session, {"a": 1, "b": "two"})
        await mem.set_state(user, session, {"a": None})
        assert (await mem.get_state(user, session)).fields == {"b": "two"}
        transport = httpx.ASGITransport(app=app)
        async with AsyncMemoryClient("http://memstack", transport=transport) as client:
            await client.set_state(user, session, {"b": None, "c": [3]})
            assert (await client.get_state(user, session)).fields == {"c": [3]}
        assert (await mem.get_state(user, session)).fields == {"c": [3]}
