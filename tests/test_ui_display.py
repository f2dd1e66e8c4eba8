"""How the inspector's pages say things, read over the app without a browser: times in
the viewer's language and zone (and the as-of field taking what the pages show), fact
values as text, the messages a session page links, the message that ended a fact, and the
page a key is refused with."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from html import unescape

import pytest

from memstack import AsyncMemory, Settings
from tests.conftest import new_id
from tests.test_api import serve
from tests.test_ui import T0, Api, budget_story, rows

SHANGHAI = {"memstack_ui_tz": "Asia/Shanghai"}


@pytest.fixture
async def api(any_settings: Settings) -> AsyncIterator[Api]:
    async with serve(any_settings) as pair:
        yield pair


def text_of(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


async def test_times_read_in_the_viewers_language_and_zone(api: Api) -> None:
    client, mem = api
    u, s, _ = await budget_story(mem)
    client.cookies.update(SHANGHAI)
    english = (await client.get(f"/ui/users/{u}", params={"lang": "en"})).text
    assert rows(english, "sessions")[0].startswith(f"{s} 3 1 Nov 2026, 17:00:00 UTC+8")
    chinese = (await client.get(f"/ui/users/{u}", params={"lang": "zh"})).text
    assert rows(chinese, "sessions")[0].startswith(f"{s} 3 2026年11月1日 17:00:00 UTC+8")
    assert 'data-zone="Asia/Shanghai"' in chinese
    # A zone the server does not know is not guessed at: the page says UTC.
    client.cookies.update({"memstack_ui_tz": "../../etc/passwd"})
    utc = (await client.get(f"/ui/users/{u}", params={"lang": "en"})).text
    assert rows(utc, "sessions")[0].startswith(f"{s} 3 1 Nov 2026, 09:00:00 UTC ")


@pytest.mark.parametrize(
    ("lang", "typed"),
    [
        ("en", "2 Nov 2026, 08:00:00 UTC+8"),  # as the page shows it
        ("en", "2 Nov 2026 08:00"),  # without seconds or zone: the viewer's zone
        ("zh", "2026年11月2日 08:00:00 UTC+8"),
        ("zh", "2026年11月2日 08:00"),
        ("en", "2026-11-02T00:00:00Z"),
    ],
)
async def test_the_as_of_field_takes_a_time_as_the_page_shows_it(
    api: Api, lang: str, typed: str
) -> None:
    client, mem = api
    u, _, _ = await budget_story(mem)
    client.cookies.update(SHANGHAI)
    page = (await client.get(f"/ui/users/{u}", params={"lang": lang, "as_of": typed})).text
    assert rows(page, "facts")[0].startswith("budget_limit 5,000 CNY")
    # The field shows the moment back in the page's own format, ready to be edited.
    shown = "2 Nov 2026, 08:00:00 UTC+8" if lang == "en" else "2026年11月2日 08:00:00 UTC+8"
    assert f'value="{shown}"' in page and f"{shown}</time>" in page
    assert 'type="datetime-local"' not in page


async def test_a_time_the_field_cannot_read_says_how_to_write_one(api: Api) -> None:
    client, mem = api
    u, _, _ = await budget_story(mem)
    for lang, example in (("en", r"\d{1,2} [A-Z][a-z]{2} \d{4}, "), ("zh", r"\d{4}年\d{1,2}月")):
        r = await client.get(f"/ui/users/{u}", params={"lang": lang, "as_of": "31 Feb 2026"})
        assert r.status_code == 422
        detail = text_of(r.text.split('id="error-detail">', 1)[1].split("</p>", 1)[0])
        assert "31 Feb 2026" in detail and re.search(example, detail), detail


async def test_fact_values_read_as_text_on_every_page(api: Api) -> None:
    client, mem = api
    u, _, ids = await budget_story(mem)
    await mem.set_fact(u, "likes", ["tea", "hiking"])
    await mem.set_fact(u, "rooms", 12000)
    await mem.set_fact(u, "nickname", "Timmy")
    user_page = (await client.get(f"/ui/users/{u}")).text
    current = {r.split()[0]: r for r in rows(user_page, "facts")}
    assert current["budget_limit"].startswith("budget_limit 8,000 CNY ")
    assert current["likes"].startswith("likes tea, hiking ")
    assert current["rooms"].startswith("rooms 12,000 ")
    assert current["nickname"].startswith("nickname Timmy ")
    timeline = text_of(user_page.split('<section id="timeline">', 1)[1])
    assert "5,000 CNY" in timeline and "8,000 CNY" in timeline
    for page in (user_page, (await client.get(f"/ui/users/{u}/messages/{ids[2]}")).text):
        values = re.findall(r'class="value">(.*?)<', page)
        assert values and not [v for v in values if re.search(r'[{}\[\]"]|&#34;|&quot;', v)]
    chinese = (await client.get(f"/ui/users/{u}", params={"lang": "zh"})).text
    assert "tea、hiking" in chinese


async def test_a_session_page_links_each_stored_message_to_its_page(api: Api) -> None:
    client, mem = api
    u, s, ids = await budget_story(mem)
    queued = await mem.remember(u, s, "user", "not stored yet", ts=T0 + timedelta(days=3))
    page = (await client.get(f"/ui/users/{u}/sessions/{s}")).text
    ledger = page.split('<section id="ledger">', 1)[1].split("</section>", 1)[0]
    for msg_id in ids:
        assert f'href="/ui/users/{u}/messages/{msg_id}"' in ledger
    # The window links its stored messages too, not the one the worker has not stored.
    window = page.split('<section id="window">', 1)[1].split("</section>", 1)[0]
    assert f'href="/ui/users/{u}/messages/{ids[0]}"' in window
    assert f"/messages/{queued}" not in window
    message = await client.get(f"/ui/users/{u}/messages/{ids[1]}")
    assert message.status_code == 200 and "好的，五千以内。" in message.text


async def diet_story(mem: AsyncMemory) -> tuple[str, list[str]]:
    """A diet stated, then withdrawn with nothing in its place."""
    u, s = new_id("u"), new_id("s")
    said = [
        await mem.remember(u, s, "user", "I'm vegetarian.", ts=T0),
        await mem.remember(u, s, "user", "I'm not vegetarian anymore.", ts=T0 + timedelta(hours=1)),
    ]
    await mem.drain(summarize=False)
    return u, said


async def test_the_message_that_ended_a_fact_is_shown_and_linked(api: Api) -> None:
    client, mem = api
    u, _, ids = await budget_story(mem)
    page = (await client.get(f"/ui/users/{u}")).text
    old = page.split('<section id="timeline">', 1)[1].split("</li>", 1)[0]
    assert "5,000 CNY" in old and "ended by" in old
    assert f'href="/ui/users/{u}/messages/{ids[2]}"' in old  # replaced: the new value's message
    ender = (await client.get(f"/ui/users/{u}/messages/{ids[2]}")).text
    assert rows(ender, "ended")[0].startswith("budget_limit 5,000 CNY")
    assert f'href="/ui/users/{u}/messages/{ids[0]}"' in ender.split('id="ended"', 1)[1]
    stated = (await client.get(f"/ui/users/{u}/messages/{ids[0]}")).text
    assert f"/messages/{ids[2]}" in stated.split('id="stated"', 1)[1].split("</section>", 1)[0]

    # Withdrawn with nothing in its place: the withdrawing message ends it.
    v, said = await diet_story(mem)
    [diet] = await mem.fact_history(v, "diet")
    assert diet.ended_by_msg_id == said[1]
    timeline = (await client.get(f"/ui/users/{v}")).text.split('<section id="timeline">', 1)[1]
    assert "ended by" in timeline and f'href="/ui/users/{v}/messages/{said[1]}"' in timeline
    assert rows((await client.get(f"/ui/users/{v}/messages/{said[1]}")).text, "ended")


async def test_a_refused_page_names_the_key_and_how_to_sign_in_with_another(
    service_settings: Settings,
) -> None:
    async with serve(service_settings) as (client, mem):
        u, _, _ = await budget_story(mem)
        other, _, _ = await budget_story(mem)
        await mem.set_fact(other, "nickname", "a secret of theirs")
        key, user_key = await mem.create_key(u)
        await mem.create_key(admin=True)  # keys exist: the pages need one
        await client.post("/ui/login", data={"key": user_key})
        for url in (f"/ui/users/{other}", "/ui/operations"):
            refused = await client.get(url, params={"lang": "en"})
            assert refused.status_code == 403
            said = text_of(refused.text)
            assert f"signed in with key {key.key_id}, a user key of {u}" in said
            assert "admin key" in said and "a secret of theirs" not in said
            assert 'href="/ui/login" id="sign-in-other"' in refused.text
            assert f'href="/ui/users/{u}" id="own-pages"' in refused.text
        chinese = await client.get(f"/ui/users/{other}", params={"lang": "zh"})
        assert chinese.status_code == 403 and f"用密钥 {key.key_id} 登录" in text_of(chinese.text)
