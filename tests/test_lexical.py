"""The lexical channel: query rewriting, BM25 over the ledger (PostgreSQL and SQLite), fusion."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memstack.core.errors import InvalidId
from memstack.core.messages import Message
from memstack.core.settings import load_settings
from memstack.memory import AsyncMemory
from memstack.recall import lexical
from memstack.stores.sql import ledger
from memstack.stores.sql import lexical as ledger_search
from tests.conftest import new_id

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def test_rewrite_keeps_topic_and_entities_and_drops_scaffolding() -> None:
    rw = lexical.rewrite_query("When did Caroline go to the LGBTQ support group?")
    assert {"caroline", "lgbtq", "support", "group"} <= set(rw.terms)
    assert "when" not in rw.terms and "did" not in rw.terms
    assert "Caroline" in rw.entities and "LGBTQ" in rw.entities
    assert rw.weights["caroline"] > rw.weights["support"]
    assert rw.temporal
    zh = lexical.rewrite_query("上次那个方案还有没有改进空间？")
    assert "方案" in zh.terms and "改进" in zh.terms
    assert "上次" not in zh.terms and "那个" not in zh.terms
    assert not zh.temporal
    # Nothing but scaffolding: search with what there is rather than nothing.
    assert lexical.rewrite_query("what did I say?").terms


async def _put(mem: AsyncMemory, user: str, texts: list[str]) -> list[str]:
    session = new_id("s")
    msgs = [
        Message(f"{session}:{i}", user, session, "user", t, T0 + timedelta(minutes=i))
        for i, t in enumerate(texts)
    ]
    async with mem.db_sessions.begin() as s:
        await ledger.insert_messages(s, msgs)
    return [m.msg_id for m in msgs]


async def test_search_ranks_by_bm25_and_never_leaves_the_user(mem: AsyncMemory) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    ids = await _put(
        mem,
        alice,
        [
            "We talked about the weather today.",
            "My budget for the laptop is 8000 yuan, battery matters.",
            "The laptop should be light.",
            "我预算不超过五千，重点关注续航。",
        ],
    )
    await _put(mem, bob, ["My budget is secret and the laptop is heavy. budget budget"])
    async with mem.db_sessions() as s:
        hits = await ledger_search.search(s, alice, lexical.rewrite_query("laptop budget?").weights)
        zh = await ledger_search.search(s, alice, lexical.rewrite_query("我的预算是多少").weights)
        none = await ledger_search.search(s, alice, lexical.rewrite_query("zebra").weights)
        with pytest.raises(InvalidId):
            await ledger_search.search(s, "bad user", lexical.rewrite_query("budget").weights)
    assert [h.msg_id for h in hits][:2] == [ids[1], ids[2]]
    assert all(h.msg_id in ids for h in hits)
    assert zh and zh[0].msg_id == ids[3]
    assert none == []


async def test_the_rare_term_outweighs_the_common_one(mem: AsyncMemory) -> None:
    user = new_id("u")
    ids = await _put(mem, user, ["budget laptop", "laptop weight", "laptop"])
    async with mem.db_sessions() as s:
        hits = await ledger_search.search(s, user, {"budget": 1.0, "laptop": 1.0})
    assert hits[0].msg_id == ids[0] and len(hits) == 3 and all(h.score > 0 for h in hits)


async def test_a_hit_says_how_much_of_the_question_it_matches(mem: AsyncMemory) -> None:
    # PostgreSQL and SQLite alike: the share is the hit's score over what a message
    # holding every query term once would score.
    user = new_id("u")
    ids = await _put(
        mem,
        user,
        [
            "我最近在学大提琴，每周六上午上课。",
            "家里的宠物上个月做了手术，恢复得不错。",
            "今天天气不错。",
        ],
    )
    async with mem.db_sessions() as s:
        hits = await ledger_search.search(
            s, user, lexical.rewrite_query("她的宠物最近做了什么手术").weights
        )
    share = {h.msg_id: h.share for h in hits}
    assert share[ids[1]] > 0.5  # the pet, the operation
    assert share[ids[0]] < 0.3  # only "最近"
    assert ids[2] not in share and all(0.0 < v <= 1.0 for v in share.values())


async def test_one_call_stores_more_messages_than_one_statement_can_bind(
    mem: AsyncMemory,
) -> None:
    # 8,000 rows of nine columns are 72,000 parameters, past PostgreSQL's 65,535 for
    # one statement: the insert splits them, and a second call finds them all present.
    user = new_id("heavy")
    ids = await _put(mem, user, [f"turn {i} about the garden" for i in range(8000)])
    async with mem.db_sessions.begin() as s:
        again = await ledger.insert_messages(
            s,
            [Message(i, user, i.split(":")[0], "user", "x", T0) for i in ids[:10]]
            + [Message(f"{ids[0]}-new", user, ids[0].split(":")[0], "user", "y", T0)],
        )
    async with mem.db_sessions() as s:
        hits = await ledger_search.search(s, user, {"garden": 1.0}, limit=5)
    assert again == 1 and len(hits) == 5  # only the one new id counts
    # The services' database is shared by the session's tests: a re-embed elsewhere
    # would otherwise embed these 8,000 rows too.
    await mem.forget_user(user)


def test_parse_keywords() -> None:
    assert lexical.parse_keywords('```json\n{"keywords": ["laptop", "budget"]}\n```') == [
        "laptop",
        "budget",
    ]
    assert lexical.parse_keywords("no json here") is None
    assert lexical.parse_keywords('{"keywords": "laptop"}') is None


class _Chat(BaseHTTPRequestHandler):
    reply = '{"keywords": ["notebook", "price limit"]}'

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        body = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": self.reply},
                }
            ],
        }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def chat_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def _rewriter(url: str, timeout_s: float) -> lexical.LLMRewriter:
    settings = load_settings(query_rewrite="llm", llm_url=url, store_timeout_s=timeout_s)
    return lexical.LLMRewriter.from_settings(settings)


async def test_llm_rewrite_adds_keywords_and_failures_fall_back(chat_server: str) -> None:
    rewriter = _rewriter(chat_server, 5)
    keywords = await rewriter.keywords("how much can I spend?")
    assert keywords == ["notebook", "price limit"]
    merged = lexical.merge_rewrite(lexical.rewrite_query("how much can I spend?"), keywords)
    assert merged.source == "llm" and {"notebook", "price", "limit"} <= set(merged.terms)
    assert merged.weights["spend"] > merged.weights["notebook"]
    await rewriter.aclose()
    down = _rewriter("http://127.0.0.1:1/v1", 1)
    assert await down.keywords("anything") is None
    await down.aclose()


class _Hanging(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self) -> None:
        type(self).calls += 1
        time.sleep(3)

    def log_message(self, *args: object) -> None:
        pass


async def test_a_hanging_rewrite_endpoint_is_waited_for_once_then_skipped() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hanging)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # A port of its own: the breaker is per endpoint, and no other test shares this one.
    rewriter = _rewriter(f"http://127.0.0.1:{server.server_address[1]}/v1", 0.3)
    try:
        for _ in range(5):
            assert await rewriter.keywords("what is my budget?") is None
        assert _Hanging.calls == 1
    finally:
        await rewriter.aclose()
        server.shutdown()


def test_a_huge_or_deep_answer_is_no_keywords() -> None:
    assert lexical.parse_keywords("{" * 100_000 + "}" * 100_000) is None
    assert lexical.parse_keywords('{"keywords": [' + '"k",' * 100 + '"k"]}') == ["k"] * 20


@pytest.mark.parametrize(
    ("query", "intent"),
    [
        ("When did Caroline go to the support group?", "date"),
        ("How many days ago did I buy the car?", "date"),
        ("什么时候买的笔记本？", "date"),
        ("What is my latest budget?", "latest"),
        ("我最近在读什么书？", "latest"),
        ("What books has Tim read?", None),
    ],
)
def test_time_intent(query: str, intent: str | None) -> None:
    assert lexical.rewrite_query(query).time_intent == intent
