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

from memstack import AsyncMemory, Document, Settings, ValidationError
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
    first = await mem.remember(u, s, "user", "我预算不超过五千", ts=T0)
    await mem.drain(summarize=False)
    # Tim is the user's own name: only the user's own words become the user's facts.
    await mem.set_identity(u, display_name="Tim", aliases=["蒂姆"])
    ids = [
        first,
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
    assert current.startswith("budget_limit 8,000 CNY 3 Nov 2026, 09:00:00 UTC")
    timeline = unescape(page.split('<section id="timeline">')[1])
    old, new = timeline.index("5,000 CNY"), timeline.index("8,000 CNY")
    assert old < new  # old value, then the value that replaced it
    for said in (ids[0], ids[2]):  # each value links to the message that stated it
        assert f'href="/ui/users/{u}/messages/{said}"' in timeline
    source = (await client.get(f"/ui/users/{u}/messages/{ids[2]}")).text
    assert "其实我可以到八千" in source and "Tim" in source
    assert rows(source, "stated")[0].startswith("budget_limit 8,000 CNY")
    assert (await client.get(f"/ui/users/{new_id('u')}/messages/{ids[2]}")).status_code == 404

    # A value set by hand has no message to link; an erased message is said to be gone.
    await mem.set_fact(u, "budget_limit", 9000)
    await mem.delete_message(u, ids[0])
    edited = unescape((await client.get(f"/ui/users/{u}")).text.split('id="timeline"')[1])
    assert "set by hand" in edited and "source message deleted" in edited
    assert f"/messages/{ids[0]}" not in edited
    assert rows(page, "sessions")[0].startswith(f"{s} 3 1 Nov 2026, 09:00:00 UTC")

    # As of a moment between the two: the old value, from the same history.
    before = (await client.get(f"/ui/users/{u}", params={"as_of": "2026-11-02T00:00:00Z"})).text
    assert rows(before, "facts")[0].startswith("budget_limit 5,000 CNY")
    # A moment typed without a zone is the viewer's: UTC, with no zone cookie.
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


# Every fact extracted below full confidence is then a candidate, never the user's fact.
@pytest.fixture
async def doubtful(any_settings: Settings) -> AsyncIterator[Api]:
    async with serve(any_settings.model_copy(update={"fact_min_confidence": 1.0})) as pair:
        yield pair


# A form the inspector's own page sent: its Origin is this server.
SAME_SITE = {"Origin": "http://memstack"}


async def candidate_story(mem: AsyncMemory) -> tuple[str, dict[str, int], list[str]]:
    """A user with two pending candidates, by key, and the messages they were read from."""
    u, s = new_id("u"), new_id("s")
    ids = [
        await mem.remember(u, s, "user", "I live in Porto.", ts=T0),
        await mem.remember(u, s, "user", "I am vegetarian.", ts=T0 + timedelta(minutes=1)),
    ]
    await mem.drain(summarize=False)
    return u, {c.key: c.id for c in await mem.candidates(u)}, ids


async def test_the_user_page_lists_pending_candidates_and_the_names_bound(doubtful: Api) -> None:
    client, mem = doubtful
    u, ids, said = await candidate_story(mem)
    assert set(ids) == {"city", "diet"} and await mem.facts(u) == []

    page = (await client.get(f"/ui/users/{u}")).text
    listed = rows(page, "candidates")
    assert [r.split()[:3] for r in listed] == [
        [f"#{ids['diet']}", "diet", "vegetarian"],
        [f"#{ids['city']}", "city", "Porto"],
    ]
    [city] = await mem.candidates(u, key="city")
    when = [f"{city.confidence:.2f}", "1", "Nov", "2026,", "09:00:00", "UTC"]
    assert listed[1].split()[3:9] == when
    assert "pending Confirm Reject" in listed[1]
    assert f'href="/ui/users/{u}/messages/{said[0]}"' in page
    for action in ("confirm", "reject"):
        assert (
            f'action="/ui/users/{u}/candidates/{ids["city"]}/{action}?candidates=pending"' in page
        )
    assert rows(page, "facts") == [] and "No name bound" in page

    source = (await client.get(f"/ui/users/{u}/messages/{said[0]}")).text
    assert [r.split()[:4] for r in rows(source, "candidates")] == [
        [f"#{ids['city']}", "city", "Porto", f"{city.confidence:.2f}"]
    ]
    assert rows(source, "stated") == []

    await mem.set_identity(u, display_name="Ana Lima", aliases=["Ana", "<b>A</b>"])
    named = (await client.get(f"/ui/users/{u}")).text
    names = unescape(re.sub(r"<[^>]+>", " ", named.split('<section id="names">')[1]))
    assert " ".join(names.split()).startswith("Display name: Ana Lima Aliases: Ana <b>A</b>")
    assert "<b>A</b>" not in named  # escaped, like every name a user gave
    chinese = (await client.get(f"/ui/users/{u}", params={"lang": "zh"})).text
    assert "候选事实" in chinese and "确认" in chinese and "别名" in chinese


async def test_confirming_and_rejecting_change_what_facts_and_candidates_return(
    doubtful: Api,
) -> None:
    client, mem = doubtful
    u, ids, said = await candidate_story(mem)

    r = await client.post(f"/ui/users/{u}/candidates/{ids['city']}/confirm", headers=SAME_SITE)
    assert r.status_code == 303
    assert r.headers["location"] == f"/ui/users/{u}?confirmed={ids['city']}#candidates"
    [fact] = await mem.facts(u)
    assert (fact.key, fact.value, fact.candidate_id) == ("city", "Porto", ids["city"])
    assert [c.key for c in await mem.candidates(u)] == ["diet"]

    back = (await client.get(r.headers["location"])).text
    assert f"Candidate #{ids['city']} confirmed" in back
    assert rows(back, "facts")[0].startswith("city Porto")
    assert [r.split()[1] for r in rows(back, "candidates")] == ["diet"]
    timeline = back.split('<section id="timeline">')[1]
    assert f"confirmed from candidate #{ids['city']}" in timeline
    assert f'href="/ui/users/{u}/messages/{said[0]}"' in timeline

    # From the list of every candidate, and back to it.
    r = await client.post(
        f"/ui/users/{u}/candidates/{ids['diet']}/reject",
        params={"candidates": "all"},
        headers=SAME_SITE,
    )
    assert (
        r.headers["location"] == f"/ui/users/{u}?candidates=all&rejected={ids['diet']}#candidates"
    )
    assert [c.status for c in await mem.candidates(u, status="all")] == ["rejected", "confirmed"]
    assert await mem.candidates(u) == [] and [f.key for f in await mem.facts(u)] == ["city"]
    every = (await client.get(r.headers["location"])).text
    assert f"Candidate #{ids['diet']} rejected" in every
    decided = rows(every, "candidates")
    assert [r.split()[1] for r in decided] == ["diet", "city"]
    decided_at = r"{} \d{{1,2}} [A-Z][a-z]{{2}} \d{{4}}, "  # with when
    assert re.search(decided_at.format("rejected"), decided[0])
    assert re.search(decided_at.format("confirmed"), decided[1])
    assert "Confirm" not in decided[0] and 'class="confirm"' not in every
    assert rows((await client.get(f"/ui/users/{u}")).text, "candidates") == []
    only = (await client.get(f"/ui/users/{u}", params={"candidates": "rejected"})).text
    assert [r.split()[1] for r in rows(only, "candidates")] == ["diet"]

    source = (await client.get(f"/ui/users/{u}/messages/{said[0]}")).text
    assert rows(source, "stated")[0].startswith("city Porto")
    assert "confirmed" in rows(source, "candidates")[0]


async def test_bad_or_decided_candidates_get_an_error_page_and_change_nothing(
    doubtful: Api,
) -> None:
    client, mem = doubtful
    u, ids, _ = await candidate_story(mem)
    other, theirs, _ = await candidate_story(mem)
    await mem.confirm_candidate(u, ids["city"])
    before = (await mem.facts(u), await mem.candidates(u, status="all"))
    refused: list[tuple[str, dict[str, str], int]] = [
        (f"{ids['city']}/confirm", SAME_SITE, 409),  # already decided
        (f"{ids['city']}/reject", SAME_SITE, 409),
        (f"{theirs['diet']}/confirm", SAME_SITE, 404),  # another user's candidate
        ("987654321/reject", SAME_SITE, 404),
        ("0/confirm", SAME_SITE, 422),
        ("abc/confirm", SAME_SITE, 422),
        (f"{2**63}/confirm", SAME_SITE, 422),
        (f"{ids['diet']}/confirm?candidates=maybe", SAME_SITE, 422),
        (f"{ids['diet']}/approve", SAME_SITE, 404),
        # Another site's form, or one that says nothing of where it came from.
        (f"{ids['diet']}/confirm", {"Origin": "http://evil.example"}, 403),
        (f"{ids['diet']}/confirm", {"Origin": "null"}, 403),
        (f"{ids['diet']}/reject", {"Referer": "http://memstack.evil.example/ui"}, 403),
        (f"{ids['diet']}/reject", {}, 403),
    ]
    for path, headers, status in refused:
        r = await client.post(f"/ui/users/{u}/candidates/{path}", headers=headers)
        assert r.status_code == status, (path, headers, r.text)
        assert r.headers["content-type"].startswith("text/html")
        assert '<p id="error-detail">' in r.text and "<header>" in r.text  # in the frame
    conflict = await client.post(
        f"/ui/users/{u}/candidates/{ids['city']}/confirm", headers=SAME_SITE
    )
    assert "only a pending one can be decided" in conflict.text
    assert (await client.get(f"/ui/users/{u}/candidates/{ids['diet']}/confirm")).status_code == 405
    assert (await mem.facts(u), await mem.candidates(u, status="all")) == before
    assert [c.status for c in await mem.candidates(other)] == ["pending", "pending"]
    assert (await client.get(f"/ui/users/{u}", params={"candidates": "maybe"})).status_code == 422
    with pytest.raises(ValidationError):  # past a 64-bit row id: no candidate's, not a crash
        await mem.confirm_candidate(u, 2**63)

    # A browser that sends a Referer but no Origin is judged by the Referer.
    referred = {"Referer": f"http://memstack/ui/users/{u}"}
    r = await client.post(f"/ui/users/{u}/candidates/{ids['diet']}/reject", headers=referred)
    assert r.status_code == 303 and [c.key for c in await mem.candidates(u, status="rejected")] == [
        "diet"
    ]


async def test_a_user_key_decides_only_its_own_candidates(service_settings: Settings) -> None:
    async with serve(service_settings.model_copy(update={"fact_min_confidence": 1.0})) as pair:
        client, mem = pair
        u, ids, _ = await candidate_story(mem)
        other, theirs, _ = await candidate_story(mem)
        _, user_key = await mem.create_key(u)
        _, admin_key = await mem.create_key(admin=True)

        # Without a key a post goes to the sign-in page, like a page, and decides nothing.
        r = await client.post(f"/ui/users/{u}/candidates/{ids['city']}/confirm", headers=SAME_SITE)
        assert (r.status_code, r.headers["location"]) == (303, "/ui/login")
        assert len(await mem.candidates(u)) == 2

        await client.post("/ui/login", data={"key": user_key})
        # Admitted exactly as the pages are: its own user's, and no other's.
        for user_id, candidate, admitted in ((u, ids, True), (other, theirs, False)):
            page = await client.get(f"/ui/users/{user_id}")
            post = await client.post(
                f"/ui/users/{user_id}/candidates/{candidate['city']}/confirm", headers=SAME_SITE
            )
            assert page.status_code == (200 if admitted else 403)
            assert post.status_code == (303 if admitted else 403), post.text
            assert "Porto" not in post.text
        assert [f.key for f in await mem.facts(u)] == ["city"]
        assert await mem.facts(other) == [] and len(await mem.candidates(other)) == 2
        # Its own candidate's id under another user's path is not a way in either.
        r = await client.post(
            f"/ui/users/{other}/candidates/{ids['diet']}/reject", headers=SAME_SITE
        )
        assert r.status_code == 403 and len(await mem.candidates(u)) == 1

        await client.get("/ui/logout")
        await client.post("/ui/login", data={"key": admin_key})
        r = await client.post(
            f"/ui/users/{other}/candidates/{theirs['diet']}/reject", headers=SAME_SITE
        )
        assert r.status_code == 303
        assert [c.key for c in await mem.candidates(other, status="rejected")] == ["diet"]


async def test_every_candidate_is_listed_a_page_at_a_time(doubtful: Api) -> None:
    client, mem = doubtful
    u, s = new_id("u"), new_id("s")
    for i in range(55):  # each statement supersedes the candidate before it
        city = "I live in Porto." if i % 2 == 0 else "I live in Lisbon."
        await mem.remember(u, s, "user", city, ts=T0 + timedelta(minutes=i))
    await mem.drain(summarize=False)
    every = await mem.candidates(u, status="all")
    assert len(every) == 55 and len(await mem.candidates(u)) == 1

    first = (await client.get(f"/ui/users/{u}", params={"candidates": "all"})).text
    listed = rows(first, "candidates")
    assert len(listed) == 50 and "Page 1 of 2" in first
    assert listed[0].startswith(f"#{every[0].id} city Porto") and "Confirm Reject" in listed[0]
    assert "superseded" in listed[1] and "Confirm" not in listed[1]
    assert 'href="?candidates=all&amp;cpage=2" rel="next"' in first
    second = (await client.get(f"/ui/users/{u}", params={"candidates": "all", "cpage": 2})).text
    assert [r.split()[0] for r in rows(second, "candidates")] == [f"#{c.id}" for c in every[50:]]
