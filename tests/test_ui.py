"""The inspector's pages (/ui), read over the app as a browser would, without the browser:
what each page shows, paging, languages, escaping, and who may see what."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from html import unescape

import httpx
import pytest
from pydantic import SecretStr

from memstack import AsyncMemory, Document, Settings
from tests.conftest import new_id
from tests.test_api import serve

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
Api = tuple[httpx.AsyncClient, AsyncMemory]


@pytest.fixture
async def api(any_settings: Settings) -> AsyncIterator[Api]:
    async with serve(any_settings) as pair:
        yield pair


def rows(html: str, section: str) -> list[str]:
    """The text of each body row of the first table in ``<section id=section>``."""
    part = html.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]
    body = part.split("<tbody>", 1)[1].split("</tbody>", 1)[0] if "<tbody>" in part else ""
    cells = re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)
    return [" ".join(unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells]


async def budget_story(mem: AsyncMemory) -> tuple[str, str, list[str]]:
    u, s = new_id("u"), new_id("s")
    ids = [
        await mem.remember(u, s, "user", "我预算不超过五千", ts=T0),
        await mem.remember(u, s, "assistant", "好的，五千以内。", ts=T0 + timedelta(seconds=5)),
        await mem.remember(u, s, "user", "其实我可以到八千", ts=T0 + timedelta(days=2), name="Tim"),
    ]
    await mem.drain(summarize=False)
    return u, s, ids


async def test_a_user_page_shows_current_facts_and_which_value_replaced_which(api: Api) -> None:
    client, mem = api
    u, s, ids = await budget_story(mem)

    page = (await client.get(f"/ui/users/{u}")).text
    [current] = rows(page, "facts")
    assert current.startswith('budget_limit {"amount": 8000, "currency": "CNY"} 2026-11-03')
    timeline = unescape(page.split('<section id="timeline">')[1])
    old, new = timeline.index('"amount": 5000'), timeline.index('"amount": 8000')
    assert old < new  # old value, then the value that replaced it
    for said in (ids[0], ids[2]):  # each value links to the message that stated it
        assert f'href="/ui/users/{u}/messages/{said}"' in timeline
    source = (await client.get(f"/ui/users/{u}/messages/{ids[2]}")).text
    assert "其实我可以到八千" in source and "Tim" in source
    assert rows(source, "stated")[0].startswith('budget_limit {"amount": 8000')
    assert (await client.get(f"/ui/users/{new_id('u')}/messages/{ids[2]}")).status_code == 404

    # A value set by hand has no message to link; an erased message is said to be gone.
    await mem.set_fact(u, "budget_limit", 9000)
    await mem.delete_message(u, ids[0])
    edited = unescape((await client.get(f"/ui/users/{u}")).text.split('id="timeline"')[1])
    assert "set by hand" in edited and "source message deleted" in edited
    assert f"/messages/{ids[0]}" not in edited
    assert rows(page, "sessions")[0].startswith(f"{s} 3 2026-11-01 09:00:00 UTC")

    # As of a moment between the two: the old value, from the same history.
    before = (await client.get(f"/ui/users/{u}", params={"as_of": "2026-11-02T00:00:00Z"})).text
    assert rows(before, "facts")[0].startswith('budget_limit {"amount": 5000')
    # A moment typed without a zone (the form's field) is read as UTC.
    naive = (await client.get(f"/ui/users/{u}", params={"as_of": "2026-10-01T00:00"})).text
    assert rows(naive, "facts") == []


async def test_a_session_page_pages_the_ledger_and_shows_the_window_beside_it(api: Api) -> None:
    client, mem = api
    u, s = new_id("u"), new_id("s")
    for i in range(120):
        role = "user" if i % 2 == 0 else "assistant"
        await mem.remember(u, s, role, f"line {i:03d}", ts=T0 + timedelta(minutes=i))
    await mem.drain(summarize=False)
    queued = await mem.remember(
        u, s, "user", "said after the worker ran", ts=T0 + timedelta(days=1)
    )

    newest = (await client.get(f"/ui/users/{u}/sessions/{s}")).text
    ledger = rows(newest, "ledger")
    # 120 stored, 50 a page: the newest page (the third, 20 rows) comes first.
    assert len(ledger) == 20 and "line 100" in ledger[0] and "line 119" in ledger[-1]
    assert "Page 3 of 3" in newest
    window = rows(newest, "window")
    assert len(window) == 40  # the window's newest 40, the queued message last
    assert "said after the worker ran" in window[-1] and "not stored yet" in window[-1]
    assert all("not stored yet" not in r for r in window[:-1])
    assert "in window" in ledger[-1] and f'id="w-{queued}"' in newest

    first = (await client.get(f"/ui/users/{u}/sessions/{s}", params={"page": 1})).text
    assert [r.split()[-1] for r in rows(first, "ledger")][:2] == ["000", "001"]
    assert len(rows(first, "ledger")) == 50 and "Page 1 of 3" in first
    assert "in window" not in rows(first, "ledger")[0]


async def test_the_context_preview_shows_the_context_and_every_candidate(api: Api) -> None:
    client, mem = api
    u, s, _ = await budget_story(mem)
    other = new_id("u")
    await mem.remember(other, s, "user", "我预算是一百万", ts=T0)
    await mem.drain(summarize=False)

    r = await client.get(f"/ui/users/{u}/context", params={"q": "我预算多少？", "session": s})
    assert r.status_code == 200
    expected = await mem.context(u, s, "我预算多少？")
    shown = unescape(r.text.split('<pre id="context-text">', 1)[1].split("</pre>", 1)[0])
    assert shown == expected.text
    assert "8000" in shown and "一百万" not in shown  # the other user's budget never
    manifest = rows(r.text, "manifest")
    assert len(manifest) == len(expected.manifest)
    kept = [m for m in manifest if m.startswith("kept ")]
    assert len(kept) == len(expected.kept()) and kept[0].startswith("kept facts")
    budgets = {row.split()[0]: row for row in rows(r.text, "context") if row.split()}
    assert budgets["facts"].split()[2] == str(expected.allocation.used["facts"])

    # The form as a browser sends it, its budget field left empty: the default budget.
    sent = await client.get(
        f"/ui/users/{u}/context", params={"q": "我预算多少？", "session": s, "budget": ""}
    )
    assert sent.status_code == 200 and 'id="manifest"' in sent.text

    # No question yet: the form, with the user's latest session chosen.
    empty = (await client.get(f"/ui/users/{u}/context")).text
    assert f'name="session" value="{s}"' in empty and 'id="manifest"' not in empty


async def test_the_knowledge_page_lists_documents_and_searches_them(api: Api) -> None:
    client, mem = api
    ns = new_id("ns").replace("-", "_")
    doc = Document(doc_id="refunds", title="Refund policy", text="Refunds are paid within 14 days.")
    await mem.kb_add(doc, namespace=ns)
    page = (await client.get("/ui/knowledge", params={"namespace": ns})).text
    assert rows(page, "documents")[0].startswith("Refund policy refunds")
    found = (
        await client.get("/ui/knowledge", params={"namespace": ns, "q": "when are refunds paid"})
    ).text
    assert "within 14 days" in found.split('<section id="hits">')[1]


async def test_the_operations_page_shows_health_backlog_and_dead_letters(
    any_settings: Settings,
) -> None:
    async with serve(any_settings.model_copy(update={"ingest_max_deliveries": 1})) as (client, mem):
        u, s = new_id("u"), new_id("s")
        await mem.queue.ensure_group()
        await mem.working.redis.xadd(mem.queue.stream, {"msg_id": "poison", "user_id": u})
        await mem.drain(summarize=False)
        await mem.remember(u, s, "user", "waiting for a worker")
        page = (await client.get("/ui/operations")).text
    health = rows(page, "health")
    assert [r.split()[:2] for r in health][:2] == [["redis", "ok"], ["database", "ok"]]
    assert re.search(r'id="backlog">1<', page)
    [dead] = [r for r in rows(page, "dead-letters") if "msg_id=poison" in r]
    assert "malformed ingest job" in dead


async def test_users_page_lists_users_a_page_at_a_time(api: Api) -> None:
    client, mem = api
    u, _, _ = await budget_story(mem)
    found, page = False, 1
    while not found:
        html = (await client.get("/ui", params={"page": page})).text
        listed = rows(html, "users")
        assert len(listed) <= 50
        found = any(r.startswith(f"{u} 1 3 ") for r in listed)
        if 'rel="next"' not in html:
            break
        page += 1
    assert found


async def test_pages_escape_what_users_wrote(api: Api) -> None:
    client, mem = api
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "<script>alert('x')</script><b>bold</b>", ts=T0)
    await mem.drain(summarize=False)
    await mem.set_fact(u, "nickname", "<img src=x onerror=alert(1)>")
    for url in (f"/ui/users/{u}", f"/ui/users/{u}/sessions/{s}"):
        html = (await client.get(url)).text
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>bold" not in html
    assert "&lt;script&gt;alert" in (await client.get(f"/ui/users/{u}/sessions/{s}")).text


async def test_pages_read_in_chinese_or_english(api: Api) -> None:
    client, mem = api
    u, _, _ = await budget_story(mem)
    english = (await client.get(f"/ui/users/{u}")).text
    assert "Current facts" in english and 'lang="en"' in english
    chinese = await client.get(f"/ui/users/{u}", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert "当前事实" in chinese.text and "事实时间线" in chinese.text
    chosen = await client.get(f"/ui/users/{u}", params={"lang": "zh"})
    assert "当前事实" in chosen.text and chosen.cookies.get("memstack_ui_lang") == "zh"
    # The choice is remembered: the next page, without the parameter, is Chinese too.
    assert "知识库" in (await client.get("/ui/knowledge")).text


async def test_bad_input_gets_an_error_page_and_changes_nothing(api: Api) -> None:
    client, mem = api
    u, s, _ = await budget_story(mem)
    for url, params in [
        ("/ui/users/not%20an%20id", {}),
        (f"/ui/users/{u}", {"as_of": "yesterday-ish"}),
        (f"/ui/users/{u}/sessions/{s}", {"page": "0"}),
        (f"/ui/users/{u}/context", {"q": "budget?", "budget": "0"}),
        (f"/ui/users/{u}/context", {"q": "budget?", "session": "no spaces"}),
    ]:
        r = await client.get(url, params=params)
        assert r.status_code == 422, (url, params, r.text)
        assert r.headers["content-type"].startswith("text/html")
        assert '<p id="error-detail">' in r.text
    assert [m.content for m in await mem.messages(u, s)][-1] == "其实我可以到八千"
    # The API's own errors stay JSON.
    assert (await client.get("/v1/users/not%20an%20id/facts")).json()["error"] == "InvalidId"


async def test_pages_take_the_same_keys_as_the_api(service_settings: Settings) -> None:
    async with serve(service_settings) as (client, mem):
        u, _, _ = await budget_story(mem)
        other, _, _ = await budget_story(mem)
        _, user_key = await mem.create_key(u)
        _, admin_key = await mem.create_key(admin=True)

        r = await client.get(f"/ui/users/{u}")
        assert r.status_code == 303 and r.headers["location"] == "/ui/login"
        wrong = await client.post("/ui/login", data={"key": user_key + "x"})
        assert wrong.status_code == 401 and "unknown, revoked or malformed" in wrong.text

        signed_in = await client.post("/ui/login", data={"key": user_key})
        assert signed_in.status_code == 303
        assert (await client.get("/ui")).headers["location"] == f"/ui/users/{u}"
        assert "budget_limit" in (await client.get(f"/ui/users/{u}")).text
        assert (await client.get(f"/ui/users/{u}/context", params={"q": "budget"})).is_success
        assert (await client.get("/ui/knowledge")).is_success
        for url in (f"/ui/users/{other}", f"/ui/users/{other}/context", "/ui/operations"):
            refused = await client.get(url, params={"q": "budget"})
            assert refused.status_code == 403, url
            assert "8000" not in refused.text and refused.text.startswith("<!doctype html>")
        # The cookie opens pages, never the API.
        assert (await client.get(f"/v1/users/{u}/facts")).status_code == 401

        await client.get("/ui/logout")
        assert (await client.get(f"/ui/users/{u}")).status_code == 303
        await client.post("/ui/login", data={"key": admin_key})
        assert (await client.get(f"/ui/users/{other}")).is_success
        assert (await client.get("/ui/operations")).is_success


async def test_a_token_signs_in_and_an_open_api_needs_no_sign_in(
    service_settings: Settings,
) -> None:
    with_token = service_settings.model_copy(
        update={"api_token": SecretStr("s3cret-token-for-tests")}
    )
    async with serve(with_token) as (client, mem):
        u, _, _ = await budget_story(mem)
        assert (await client.get(f"/ui/users/{u}")).status_code == 303
        await client.post("/ui/login", data={"key": "s3cret-token-for-tests"})
        assert "budget_limit" in (await client.get(f"/ui/users/{u}")).text
    async with serve(service_settings) as (client, mem):
        assert "no keys and no token" in (await client.get("/ui/login")).text
        assert (await client.get("/ui/operations")).is_success
