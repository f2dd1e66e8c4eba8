"""The inspector in a real browser: Debian's Chromium, headless, driven through its
ChromeDriver (Selenium). Each page is loaded against a real ``memstack serve`` app on
Redis and PostgreSQL, its forms are used as a person would, and a screenshot of each is
kept under ``artifacts/screenshots/`` (git-ignored) for a reviewer of the CI run.

Without Chromium these tests skip, unless MEMSTACK_REQUIRE_SERVICES is set (CI), where
they fail: `.ci/run` installs it (`apt-get install chromium chromium-driver`).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pydantic import SecretStr

from memstack import Document, Memory, Settings
from memstack.server.http import create_app
from tests.conftest import _unavailable, make_settings, new_id

pytestmark = pytest.mark.slow

SCREENSHOTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"
TOKEN = "browser-test-token"
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
# The browser's own zone, so the pages' local times are checked against a known offset.
ZONE = "Asia/Shanghai"
WAIT_S = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory, redis_url: str, pg_url: str) -> Settings:
    home = tmp_path_factory.mktemp("browser")
    base = make_settings(home, redis_url=redis_url, database_url=pg_url, auto_migrate=False)
    return base.model_copy(update={"api_token": SecretStr(TOKEN)})


@pytest.fixture(scope="module")
def story(settings: Settings) -> Iterator[dict[str, str]]:
    """A user whose budget changed, a message not stored yet, and a knowledge document."""
    user, session = new_id("alice"), new_id("s")
    with Memory(settings) as mem:
        mem.remember(user, session, "user", "我预算不超过五千", ts=T0)
        mem.drain(summarize=False)
        # Tim is the user's own name, so what Tim says is the user's.
        mem.set_identity(user, display_name="Tim")
        mem.remember(user, session, "assistant", "好的，五千以内。", ts=T0 + timedelta(seconds=5))
        later = T0 + timedelta(days=2)
        mem.remember(user, session, "user", "其实我可以到八千", ts=later, name="Tim")
        mem.drain(summarize=False)
        mem.remember(user, session, "user", "这句还在队列里", ts=later + timedelta(minutes=1))
        doc = Document(doc_id="returns", title="Returns", text="Goods may be returned in 30 days.")
        mem.kb_add(doc)
        yield {"user": user, "session": session}


@pytest.fixture(scope="module")
def server(settings: Settings, story: dict[str, str]) -> Iterator[str]:
    port = _free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, name="memstack-ui", daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not running.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the app did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(WAIT_S)


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[Any]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        _unavailable("selenium", exc)
    if chromium is None or driver_path is None:
        _unavailable("Chromium", FileNotFoundError("apt-get install chromium chromium-driver"))
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--lang=en-GB"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    service = Service(executable_path=driver_path, env={**os.environ, "TZ": ZONE})
    driver = webdriver.Chrome(service=service, options=options)
    driver.implicitly_wait(5)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        driver.get(f"{server}/ui/login")
        driver.find_element("id", "key").send_keys(TOKEN)
        click(driver, "#sign-in button")
        yield driver
    finally:
        driver.quit()


def click(browser: Any, css: str) -> None:
    """Click and wait for the page it leads to: a click returns before the next page loads."""
    from selenium.webdriver.support.wait import WebDriverWait

    # A mark on the old page's window, gone once the next page replaces it. Not an
    # element's staleness: Chromium 156 answers a query on a node of the old page with
    # an "unhandled inspector error" instead of a stale-element error.
    browser.execute_script("window.__leaving = true")
    browser.find_element("css selector", css).click()
    WebDriverWait(browser, WAIT_S).until(
        lambda b: b.execute_script("return !window.__leaving && document.readyState === 'complete'")
    )


def shot(browser: Any, name: str) -> None:
    browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def texts(browser: Any, css: str) -> list[str]:
    return [str(e.text) for e in browser.find_elements("css selector", css)]


def test_a_page_without_a_key_goes_to_the_sign_in_page(server: str, browser: Any) -> None:
    browser.delete_all_cookies()
    browser.get(f"{server}/ui/operations")
    assert browser.current_url.endswith("/ui/login")
    browser.find_element("id", "key").send_keys("not-a-key")
    click(browser, "#sign-in button")
    assert "unknown, revoked or malformed" in browser.find_element("id", "wrong-key").text
    shot(browser, "sign-in-refused")
    browser.find_element("id", "key").send_keys(TOKEN)
    click(browser, "#sign-in button")
    assert browser.find_element("tag name", "h1").text == "Users"
    click(browser, "#sign-out")
    assert browser.current_url.endswith("/ui/login")
    browser.find_element("id", "key").send_keys(TOKEN)
    click(browser, "#sign-in button")


def test_users_facts_timeline_and_sessions(
    server: str, browser: Any, story: dict[str, str]
) -> None:
    user = story["user"]
    browser.get(f"{server}/ui/users/{user}")
    [current] = texts(browser, "#facts tbody tr")
    assert current.startswith("budget_limit 8,000 CNY")
    timeline = texts(browser, '.timeline[data-key="budget_limit"] li')
    assert "5,000 CNY" in timeline[0] and "replaced by" in timeline[0]
    assert "8,000 CNY" in timeline[1] and "current" in timeline[1]
    # Shown in the browser's zone (UTC+8), not the server's UTC.
    [first_seen] = texts(browser, "#sessions tbody tr td:nth-child(3)")
    assert first_seen == "1 Nov 2026, 17:00:00 UTC+8"
    shot(browser, "user")
    click(browser, '.timeline[data-key="budget_limit"] li.current a')
    assert "其实我可以到八千" in browser.find_element("id", "message").text
    assert texts(browser, "#stated tbody tr")[0].startswith("budget_limit 8,000 CNY")
    shot(browser, "message")
    browser.back()

    click(browser, f'#sessions a[href$="/{story["session"]}"]')
    ledger = texts(browser, "#ledger tbody tr")
    assert len(ledger) == 3 and "Tim" in ledger[2]
    window = texts(browser, "#window tbody tr")
    assert "这句还在队列里" in window[-1] and "not stored yet" in window[-1]
    shot(browser, "session")


@pytest.mark.parametrize(
    ("lang", "shown"),
    [("en", "1 Nov 2026, 17:00:00 UTC+8"), ("zh", "2026年11月1日 17:00:00 UTC+8")],
)
def test_the_as_of_field_takes_a_time_copied_from_the_page(
    server: str, browser: Any, story: dict[str, str], lang: str, shown: str
) -> None:
    browser.get(f"{server}/ui/users/{story['user']}?lang={lang}")
    # The moment 5000 was said, copied from the timeline as the page shows it.
    said = browser.find_element("css selector", '.timeline[data-key="budget_limit"] li time')
    assert said.text == shown
    field = browser.find_element("id", "as-of")
    assert field.get_attribute("type") == "text"
    field.send_keys(said.text)
    click(browser, "#as-of-form button")
    [then] = texts(browser, "#facts tbody tr")
    assert then.startswith("budget_limit 5,000 CNY")
    # The field keeps the moment, written as the rows write times.
    assert browser.find_element("id", "as-of").get_attribute("value") == shown
    assert browser.find_element("css selector", "#facts h2 time").text == shown
    shot(browser, f"facts-as-of-{lang}")
    # Without seconds or zone, the viewer's own zone: 08:00 on 2 Nov in UTC+8.
    browser.find_element("id", "as-of").clear()
    browser.find_element("id", "as-of").send_keys(
        "2 Nov 2026 08:00" if lang == "en" else "2026年11月2日 08:00"
    )
    click(browser, "#as-of-form button")
    assert texts(browser, "#facts tbody tr")[0].startswith("budget_limit 5,000 CNY")
    browser.get(f"{server}/ui/users/{story['user']}?lang=en")


def test_the_context_preview_shows_the_context_and_its_manifest(
    server: str, browser: Any, story: dict[str, str]
) -> None:
    browser.get(f"{server}/ui/users/{story['user']}")
    click(browser, "#open-preview")
    browser.find_element("id", "question").send_keys("我预算多少？")
    click(browser, "#assemble")
    context = browser.find_element("id", "context-text").text
    assert "8000" in context and "我预算多少？" in context
    kept = browser.find_elements("css selector", "#manifest tr.kept")
    assert kept and kept[0].get_attribute("data-layer") == "facts"
    layers = {
        e.get_attribute("data-layer")
        for e in browser.find_elements("css selector", "#budget tr[data-layer]")
    }
    assert {"facts", "window", "semantic"} <= layers
    shot(browser, "context-preview")


def test_knowledge_base_and_operations(server: str, browser: Any) -> None:
    browser.get(f"{server}/ui/knowledge")
    assert texts(browser, "#documents tbody tr")[0].startswith("Returns returns")
    browser.find_element("id", "kb-query").send_keys("Goods may be returned")
    click(browser, "#kb-search button")
    assert "30 days" in browser.find_element("id", "hits").text
    shot(browser, "knowledge")
    browser.get(f"{server}/ui/operations")
    statuses = {
        e.get_attribute("data-store"): e.text
        for e in browser.find_elements("css selector", "#health tr[data-store]")
    }
    assert statuses["redis"].split()[1] == "ok" and statuses["database"].split()[1] == "ok"
    assert int(browser.find_element("id", "backlog").text) >= 1  # the queued message
    shot(browser, "operations")


def test_the_pages_switch_to_chinese(server: str, browser: Any, story: dict[str, str]) -> None:
    browser.get(f"{server}/ui/users/{story['user']}")
    click(browser, "#lang-switch")
    assert browser.find_element("css selector", "#facts h2").text.startswith("当前事实")
    assert browser.find_element("css selector", "#timeline h2").text == "事实时间线"
    first_seen = texts(browser, "#sessions tbody tr td:nth-child(3)")[0]
    assert first_seen == "2026年11月1日 17:00:00 UTC+8"
    shot(browser, "user-zh")
    click(browser, "#lang-switch")
    assert browser.find_element("css selector", "#facts h2").text.startswith("Current facts")


@pytest.fixture(scope="module")
def ten_thousand(settings: Settings) -> dict[str, str]:
    user, session = new_id("bulk"), new_id("s")
    with Memory(settings) as mem:
        for i in range(10_000):
            role = "user" if i % 2 == 0 else "assistant"
            mem.remember(user, session, role, f"message {i:05d}", ts=T0 + timedelta(seconds=i))
        mem.drain(summarize=False)
    return {"user": user, "session": session}


def test_ten_thousand_messages_are_read_a_page_at_a_time(
    server: str, browser: Any, ten_thousand: dict[str, str]
) -> None:
    user, session = ten_thousand["user"], ten_thousand["session"]
    browser.get(f"{server}/ui/users/{user}/sessions/{session}?lang=en")
    rows = texts(browser, "#ledger tbody tr")
    assert len(rows) == 50 and "message 09950" in rows[0] and "message 09999" in rows[-1]
    assert "Page 200 of 200" in browser.find_element("css selector", "#ledger .pager").text
    shot(browser, "session-10k")
    click(browser, '#ledger .pager a[href="?page=1"]')
    rows = texts(browser, "#ledger tbody tr")
    assert "message 00000" in rows[0] and "message 00049" in rows[-1]
    click(browser, '#ledger .pager a[rel="next"]')
    assert "message 00050" in texts(browser, "#ledger tbody tr")[0]


def test_a_user_signs_in_and_confirms_a_fact_candidate(
    server: str, browser: Any, settings: Settings
) -> None:
    user, session = new_id("bea"), new_id("s")
    # Below full confidence every extracted fact is a candidate, not yet the user's fact.
    with Memory(settings.model_copy(update={"fact_min_confidence": 1.0})) as mem:
        mem.remember(user, session, "user", "I live in Porto.", ts=T0)
        mem.drain(summarize=False)
        [candidate] = mem.candidates(user)
        _, key = mem.create_key(user)
    browser.delete_all_cookies()
    try:
        browser.get(f"{server}/ui/login")
        browser.find_element("id", "key").send_keys(key)
        click(browser, "#sign-in button")
        assert browser.current_url == f"{server}/ui/users/{user}"  # a user key's own page
        assert texts(browser, "#facts tbody tr") == []
        [pending] = texts(browser, "#candidates tbody tr")
        said = f"#{candidate.id} city Porto {candidate.confidence:.2f} 1 Nov 2026, 17:00:00 UTC+8"
        assert pending.startswith(said) and "pending" in pending
        shot(browser, "candidates")
        click(browser, f'tr[data-candidate="{candidate.id}"] button.confirm')

        assert browser.find_element("id", "notice").text.startswith(f"Candidate #{candidate.id}")
        [fact] = texts(browser, "#facts tbody tr")
        assert fact.startswith("city Porto") and fact.endswith("1.00")
        assert texts(browser, "#candidates tbody tr") == []
        [version] = texts(browser, '.timeline[data-key="city"] li')
        assert f"confirmed from candidate #{candidate.id}" in version
        shot(browser, "candidate-confirmed")
        with Memory(settings) as mem:
            assert [(f.key, f.value) for f in mem.facts(user)] == [("city", "Porto")]
            assert [c.status for c in mem.candidates(user, status="all")] == ["confirmed"]
    finally:  # the other tests read every user's pages, as the token
        browser.delete_all_cookies()
        browser.get(f"{server}/ui/login")
        browser.find_element("id", "key").send_keys(TOKEN)
        click(browser, "#sign-in button")


def test_a_session_page_opens_each_message_and_a_fact_shows_what_ended_it(
    server: str, browser: Any, story: dict[str, str]
) -> None:
    user = story["user"]
    browser.get(f"{server}/ui/users/{user}/sessions/{story['session']}")
    # Every stored row links (an earlier test's drain may have stored the queued one).
    links = browser.find_elements("css selector", "#ledger tbody tr a.message-link")
    assert len(links) == len(texts(browser, "#ledger tbody tr")) >= 3
    click(browser, "#ledger tbody tr:nth-child(2) a.message-link")
    assert "好的，五千以内。" in browser.find_element("id", "message").text
    shot(browser, "message-from-session")

    browser.get(f"{server}/ui/users/{user}")
    old = browser.find_element("css selector", '.timeline[data-key="budget_limit"] li.ended')
    assert "ended by" in old.text
    click(browser, '.timeline[data-key="budget_limit"] li.ended .ended-by a')
    assert "其实我可以到八千" in browser.find_element("id", "message").text
    [ended] = texts(browser, "#ended tbody tr")
    assert ended.startswith("budget_limit 5,000 CNY 1 Nov 2026, 17:00:00 UTC+8")
    shot(browser, "message-ended-a-fact")


def test_values_read_as_text(server: str, browser: Any, settings: Settings) -> None:
    user = new_id("val")
    with Memory(settings) as mem:
        mem.remember(user, new_id("s"), "user", "hello", ts=T0)
        mem.drain(summarize=False)
        mem.set_fact(user, "likes", ["tea", "hiking"])
        mem.set_fact(user, "rooms", 12000)
    browser.get(f"{server}/ui/users/{user}")
    current = {
        str(e.get_attribute("data-key")): e.text
        for e in browser.find_elements("css selector", "#current-facts tbody tr")
    }
    assert current["likes"].startswith("likes tea, hiking")
    assert current["rooms"].startswith("rooms 12,000")
    assert "tea, hiking" in browser.find_element("css selector", '.timeline[data-key="likes"]').text
    shot(browser, "values-as-text")


def test_a_refused_page_says_which_key_and_how_to_sign_in_with_another(
    server: str, browser: Any, settings: Settings, story: dict[str, str]
) -> None:
    own = new_id("cy")
    with Memory(settings) as mem:
        key, text = mem.create_key(own)
    browser.delete_all_cookies()
    try:
        browser.get(f"{server}/ui/login")
        browser.find_element("id", "key").send_keys(text)
        click(browser, "#sign-in button")
        browser.get(f"{server}/ui/users/{story['user']}")
        assert "not open to the key" in browser.find_element("tag name", "h1").text
        who = browser.find_element("id", "refused-who").text
        assert who == f"You are signed in with key {key.key_id}, a user key of {own}."
        assert "admin key" in browser.find_element("id", "refused-why").text
        assert "8,000" not in browser.find_element("tag name", "main").text
        shot(browser, "refused")
        click(browser, "#sign-in-other")
        browser.find_element("id", "key").send_keys(TOKEN)
        click(browser, "#sign-in button")
        browser.get(f"{server}/ui/users/{story['user']}")
        assert texts(browser, "#facts tbody tr")[0].startswith("budget_limit 8,000 CNY")
    finally:  # the other tests read every user's pages, as the token
        browser.delete_all_cookies()
        browser.get(f"{server}/ui/login")
        browser.find_element("id", "key").send_keys(TOKEN)
        click(browser, "#sign-in button")
