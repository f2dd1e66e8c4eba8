"""The LLM extractor against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memstack.core.settings import Settings, load_settings
from memstack.ingest.extraction import (
    BatchMessage,
    ChatJSON,
    LLMExtractor,
    RulesExtractor,
    build_extractor,
    prepare_batch,
)
from memstack.ingest.extraction.llm import json_payload
from memstack.ingest.extraction.prompts import BATCH_PROMPT, EXTRACT_PROMPT
from memstack.memory import AsyncMemory
from memstack.ml.chat import Breaker
from tests.conftest import new_id

MODEL = "test-model-7b"


@dataclass
class Sleep:
    seconds: float
    then: str = '{"facts": []}'


@dataclass
class Status:
    code: int


@dataclass
class Raw:
    """A body sent as it is (an HTML page, a cut JSON, a huge one); ``length=False``
    sends no Content-Length and ends the body by closing the connection."""

    body: bytes
    content_type: str = "text/html"
    status: int = 200
    length: bool = True


Step = str | Sleep | Status | Raw


@dataclass
class FakeLLM:
    """Answers /v1/chat/completions from ``script``, one step per request, and records them."""

    url: str = ""
    script: list[Step] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def messages(self, i: int = -1) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = self.requests[i]["messages"]
        return msgs


def _handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body["_path"] = self.path
            fake.requests.append(body)
            step: Step = fake.script.pop(0) if fake.script else '{"facts": []}'
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                step = step.then
            if isinstance(step, Status):
                self._send(step.code, {"error": {"message": "scripted failure"}})
                return
            if isinstance(step, Raw):
                self._send_raw(step)
                return
            self._send(
                200,
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": step},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                },
            )

        def _send(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and left, which is the point of some tests

        def _send_raw(self, step: Raw) -> None:
            try:
                self.send_response(step.status)
                self.send_header("Content-Type", step.content_type)
                if step.length:
                    self.send_header("Content-Length", str(len(step.body)))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(step.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client refused the body part way, which is the point

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    fake = FakeLLM()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.block_on_close = False  # a handler still sleeping must not hold the teardown
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def make_extractor(fake: FakeLLM, timeout_s: float = 5.0) -> LLMExtractor:
    return LLMExtractor(ChatJSON(base_url=fake.url, model=MODEL, timeout_s=timeout_s))


def facts_json(*facts: dict[str, Any]) -> str:
    return json.dumps({"facts": list(facts)}, ensure_ascii=False)


BUDGET_8000 = {
    "key": "max_budget",
    "value": {"amount": "八千", "currency": "rmb"},
    "type": "constraint",
    "confidence": 0.9,
    "source": "user_stated",
    "override": True,
}
FOCUS = {"key": "Priorities", "value": "续航和重量", "type": "preference", "source": "user_stated"}
KNOWN = {"budget_limit": {"amount": 5000, "currency": "CNY"}}


async def test_good_json_is_parsed_and_normalised(fake_llm: FakeLLM) -> None:
    fake_llm.script = [facts_json(BUDGET_8000, FOCUS)]
    ex = make_extractor(fake_llm)
    facts = {
        f.key: f for f in await ex.extract("其实我可以到八千，重点关注续航和重量", known=KNOWN)
    }

    assert facts["budget_limit"].value == {"amount": 8000, "currency": "CNY"}
    assert facts["budget_limit"].override is True
    # The model left supersedes out; the known value fills it.
    assert facts["budget_limit"].supersedes == {"amount": 5000, "currency": "CNY"}
    assert facts["focus"].value == ["续航", "重量"]
    assert facts["focus"].type == "preference"
    assert (ex.stats.calls, ex.stats.retries, ex.stats.fallbacks) == (1, 0, 0)

    req = fake_llm.requests[0]
    assert req["_path"] == "/v1/chat/completions"
    assert req["model"] == MODEL
    sent = json.loads(req["messages"][-1]["content"])
    assert sent["known_facts"] == KNOWN
    assert sent["message"] == "其实我可以到八千，重点关注续航和重量"
    system = req["messages"][0]["content"]
    assert "compromise" in system and "supersedes" in system
    await ex.aclose()


async def test_fenced_json_is_accepted(fake_llm: FakeLLM) -> None:
    fake_llm.script = ["Here you go:\n```json\n" + facts_json(FOCUS) + "\n```\n"]
    ex = make_extractor(fake_llm)
    facts = await ex.extract("重点关注续航和重量")
    assert [f.key for f in facts] == ["focus"]
    assert ex.stats.retries == 0
    await ex.aclose()


async def test_malformed_then_good_retries_once(fake_llm: FakeLLM) -> None:
    fake_llm.script = ['{"facts": [{"key": "budget"', facts_json(BUDGET_8000)]
    ex = make_extractor(fake_llm)
    facts = await ex.extract("其实我可以到八千", known=KNOWN)
    assert [f.value for f in facts] == [{"amount": 8000, "currency": "CNY"}]
    assert (ex.stats.calls, ex.stats.retries, ex.stats.malformed, ex.stats.fallbacks) == (
        2,
        1,
        1,
        0,
    )
    # The retry shows the model its own broken answer and asks again.
    retry = fake_llm.messages(1)
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[2]["content"] == '{"facts": [{"key": "budget"'
    await ex.aclose()


async def test_malformed_twice_falls_back_to_rules(fake_llm: FakeLLM) -> None:
    fake_llm.script = ["not json at all", '{"facts": "nope"}', facts_json(FOCUS)]
    ex = make_extractor(fake_llm)
    facts = await ex.extract("我预算不超过五千")
    # The rules answered: their budget, not the third scripted answer.
    assert [(f.key, f.value) for f in facts] == [
        ("budget_limit", {"amount": 5000, "currency": "CNY"})
    ]
    assert (ex.stats.calls, ex.stats.retries, ex.stats.fallbacks) == (2, 1, 1)
    assert len(fake_llm.requests) == 2
    await ex.aclose()


@pytest.mark.parametrize(
    "bad",
    [
        {"key": "mood", "value": "happy"},  # unknown key without a type
        {"key": "budget", "value": 5000, "confidence": 7},
    ],
)
async def test_an_invalid_fact_sends_the_message_to_the_rules(
    fake_llm: FakeLLM, bad: dict[str, Any]
) -> None:
    # A usable answer with one invalid fact: the model misread this message, so the
    # rules read it instead, at once (a retry would cost another call for little).
    fake_llm.script = [facts_json(FOCUS, bad)]
    ex = make_extractor(fake_llm)
    facts = await ex.extract("我预算不超过五千")
    assert [(f.key, f.value, f.source) for f in facts] == [
        ("budget_limit", {"amount": 5000, "currency": "CNY"}, "user_stated")
    ]
    assert (ex.stats.calls, ex.stats.malformed, ex.stats.dropped_facts, ex.stats.fallbacks) == (
        1,
        0,
        1,
        1,
    )
    await ex.aclose()


async def test_timeout_falls_back_quickly(fake_llm: FakeLLM) -> None:
    fake_llm.script = [Sleep(3.0, facts_json(BUDGET_8000))]
    ex = make_extractor(fake_llm, timeout_s=0.3)
    start = time.perf_counter()
    facts = await ex.extract("其实我可以到八千", known=KNOWN)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.5, f"fallback took {elapsed:.2f}s"
    assert facts[0].value == {"amount": 8000, "currency": "CNY"}  # from the rules
    assert ex.stats.timeouts == 1 and ex.stats.fallbacks == 1
    assert ex.stats.retries == 0 and len(fake_llm.requests) == 1  # no retry after a timeout
    await ex.aclose()


async def test_connection_refused_falls_back() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before use: nothing listens there
    ex = LLMExtractor(ChatJSON(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL, timeout_s=2))
    facts = await ex.extract("不要推荐游戏本")
    assert facts[0].key == "do_not_recommend"
    assert ex.stats.errors == 1 and ex.stats.fallbacks == 1
    await ex.aclose()


async def test_server_error_falls_back_without_retry(fake_llm: FakeLLM) -> None:
    fake_llm.script = [Status(500), facts_json(FOCUS)]
    ex = make_extractor(fake_llm)
    facts = await ex.extract("我叫张三")
    assert [(f.key, f.value) for f in facts] == [("name", "张三")]
    assert len(fake_llm.requests) == 1 and ex.stats.fallbacks == 1
    await ex.aclose()


async def test_assistant_messages_are_not_sent(fake_llm: FakeLLM) -> None:
    ex = make_extractor(fake_llm)
    assert await ex.extract("建议您考虑预算八千的机型", role="assistant") == []
    assert fake_llm.requests == []
    await ex.aclose()


async def test_model_values_are_normalised_and_sources_kept(fake_llm: FakeLLM) -> None:
    fake_llm.script = [
        facts_json(
            # A range from the model is read as its upper bound, never kept as a range.
            {"key": "预算", "value": {"min": 5000, "max": 8000}, "type": "constraint"},
            {"key": "commute", "value": "地铁一小时", "type": "profile", "source": "Inferred"},
            {"key": "likes", "value": ["ThinkPad"], "type": "task", "source": "user_stated"},
        )
    ]
    ex = make_extractor(fake_llm)
    facts = {
        f.key: f for f in await ex.extract("通勤挺远的，我也喜欢ThinkPad", known={"likes": ["Mac"]})
    }
    assert facts["budget_limit"].value == {"amount": 8000, "currency": "CNY"}
    assert facts["commute"].source == "inferred"
    assert facts["commute"].value == "地铁一小时"
    # Canonical keys carry the vocabulary's type; list values come back whole.
    assert facts["likes"].type == "preference"
    assert facts["likes"].value == ["Mac", "ThinkPad"]
    await ex.aclose()


def test_json_payload_tolerates_fences_and_prose() -> None:
    assert json_payload('```json\n{"facts": []}\n```') == {"facts": []}
    assert json_payload('Sure! {"facts": []} Hope this helps.') == {"facts": []}
    with pytest.raises(ValueError):
        json_payload("I could not find any facts.")


def test_build_extractor(fake_llm: FakeLLM) -> None:
    assert isinstance(build_extractor(load_settings()), RulesExtractor)
    llm = build_extractor(load_settings(extractor="llm", llm_url=fake_llm.url, llm_model=MODEL))
    assert isinstance(llm, LLMExtractor)
    assert llm.chat.model == MODEL


# --- whatever the endpoint answers, the rules stand in ------------------------------------

RULES_BUDGET = [("budget_limit", {"amount": 5000, "currency": "CNY"})]
SAID = "我预算不超过五千"


def completion(content: str, **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        **extra,
    }
    return json.dumps(body, ensure_ascii=False).encode()


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def deep_answer(depth: int) -> str:
    """An answer whose value nests ``depth`` lists deep, written out as text."""
    return '{"facts": [{"key": "likes", "value": ' + "[" * depth + '"x"' + "]" * depth + "}]}"


async def rules_answered(ex: LLMExtractor, text: str = SAID) -> list[tuple[str, Any]]:
    return [(f.key, f.value) for f in await ex.extract(text)]


@pytest.mark.parametrize(
    "body",
    [
        Raw(b"<html><body><h1>502 Bad Gateway</h1></body></html>"),  # a proxy's page, 200
        Raw(completion(facts_json(FOCUS))[:40], content_type="application/json"),  # cut short
        Raw(b'{"id": "x", "object": "chat.completion"}', content_type="application/json"),
        Raw(b"[1, 2, 3]", content_type="application/json"),
    ],
    ids=["html", "truncated", "no-choices", "not-an-object"],
)
async def test_a_body_that_is_no_completion_falls_back(fake_llm: FakeLLM, body: Raw) -> None:
    fake_llm.script = [body]
    ex = make_extractor(fake_llm)
    assert await rules_answered(ex) == RULES_BUDGET
    assert ex.stats.errors == 1 and ex.stats.fallbacks == 1 and ex.stats.calls == 1
    await ex.aclose()


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "streamed"])
async def test_a_body_over_the_limit_is_refused_before_parsing(
    fake_llm: FakeLLM, length: bool
) -> None:
    # A valid answer, padded to 1 MB: it is never parsed, so its fact is never used.
    padded = completion(facts_json(BUDGET_8000), padding="x" * 1_000_000)
    fake_llm.script = [Raw(padded, content_type="application/json", length=length)]
    ex = make_extractor(fake_llm)
    assert await rules_answered(ex) == RULES_BUDGET
    assert ex.stats.oversized == 1 and ex.stats.fallbacks == 1
    await ex.aclose()


@pytest.mark.parametrize(
    "key",
    ["k" * 5000, "favourite{colour}#1", "通勤时间", "a" * 129],
    ids=["5000-chars", "unsafe", "not-an-id", "129-chars"],
)
async def test_a_fact_with_a_bad_key_sends_the_message_to_the_rules(
    fake_llm: FakeLLM, key: str
) -> None:
    fake_llm.script = [facts_json({"key": key, "value": "x", "type": "profile"}, FOCUS)]
    ex = make_extractor(fake_llm)
    assert await rules_answered(ex) == RULES_BUDGET
    assert ex.stats.dropped_facts == 1 and ex.stats.fallbacks == 1
    await ex.aclose()


async def test_keys_of_the_vocabulary_and_safe_ids_are_kept(fake_llm: FakeLLM) -> None:
    fake_llm.script = [
        facts_json(
            {"key": "预算", "value": 5000},
            {"key": "Favourite Colour", "value": "blue", "type": "preference"},
            {"key": "c" * 128, "value": "x", "type": "profile"},
        )
    ]
    ex = make_extractor(fake_llm)
    keys = [f.key for f in await ex.extract(SAID)]
    assert keys == ["budget_limit", "favourite_colour", "c" * 128]
    assert ex.stats.fallbacks == 0
    await ex.aclose()


@pytest.mark.parametrize(
    "value",
    [
        "a\x00b",  # NUL: PostgreSQL cannot store it
        ["a\ud800b"],  # a lone surrogate: not UTF-8
        {"note\x00": "x"},  # NUL in a key of the value
        nested(9),  # deeper than fact values go (8)
        "y" * 3000,  # over max_fact_value_bytes (2 KiB)
    ],
    ids=["nul", "surrogate", "nul-in-key", "9-deep", "3-KB"],
)
async def test_a_fact_with_a_bad_value_sends_the_message_to_the_rules(
    fake_llm: FakeLLM, value: Any
) -> None:
    # Written as the model's JSON would be: NUL and surrogates as \u escapes.
    fake_llm.script = [json.dumps({"facts": [{"key": "city", "value": value}, FOCUS]})]
    ex = make_extractor(fake_llm)
    assert await rules_answered(ex) == RULES_BUDGET
    assert ex.stats.dropped_facts == 1 and ex.stats.fallbacks == 1
    await ex.aclose()


async def test_a_bad_supersedes_or_nan_sends_the_message_to_the_rules(fake_llm: FakeLLM) -> None:
    bad_old = {**BUDGET_8000, "supersedes": nested(20)}
    fake_llm.script = [
        facts_json(bad_old),
        '{"facts": [{"key": "budget", "value": NaN}]}',  # Python's json reads NaN
    ]
    ex = make_extractor(fake_llm)
    assert await rules_answered(ex) == RULES_BUDGET
    assert await rules_answered(ex) == RULES_BUDGET
    assert ex.stats.dropped_facts == 2 and ex.stats.fallbacks == 2
    await ex.aclose()


async def test_an_answer_nested_100k_deep_falls_back(fake_llm: FakeLLM) -> None:
    fake_llm.script = [deep_answer(100_000), deep_answer(100_000)]
    ex = make_extractor(fake_llm)
    assert await rules_answered(ex) == RULES_BUDGET
    assert ex.stats.malformed == 2 and ex.stats.fallbacks == 1
    await ex.aclose()


async def test_known_facts_sent_to_the_model_are_checked(fake_llm: FakeLLM) -> None:
    ex = make_extractor(fake_llm)
    known = {"budget": 5000, "likes": "y" * 5000, "bad key#": "x", "city": "a\x00"}
    await ex.extract(SAID, known=known)
    sent = json.loads(fake_llm.requests[0]["messages"][-1]["content"])
    assert sent["known_facts"] == {"budget_limit": {"amount": 5000, "currency": "CNY"}}
    await ex.aclose()


# --- one call per batch, and none while the endpoint is known to hang ---------------------


def batch_of(*texts: str, owner: str = "u1") -> list[BatchMessage]:
    return [BatchMessage(owner, t) for t in texts]


async def test_a_batch_is_one_request_answered_by_message_index(fake_llm: FakeLLM) -> None:
    answer = {
        "facts_by_message": {
            "0": [{"key": "budget", "value": 5000, "source": "user_stated"}],
            "1": [],
            "2": [BUDGET_8000],
        }
    }
    fake_llm.script = [json.dumps(answer, ensure_ascii=False)]
    ex = make_extractor(fake_llm)
    msgs = batch_of("我预算不超过五千", "好的", "其实我可以到八千")
    batch = await prepare_batch(ex, msgs, {"u1": {"city": "上海"}})
    known: dict[str, Any] = {"city": "上海"}
    first = await batch.extract(0, known=known)
    known["budget_limit"] = first[0].value
    assert await batch.extract(1, known=known) == []
    [budget] = await batch.extract(2, known=known)
    assert budget.value == {"amount": 8000, "currency": "CNY"}
    # supersedes comes from the value known when the message is read, as with the rules.
    assert budget.supersedes == {"amount": 5000, "currency": "CNY"}
    assert len(fake_llm.requests) == 1 and ex.stats.fallbacks == 0
    sent = json.loads(fake_llm.requests[0]["messages"][-1]["content"])
    assert sent["known_facts"] == {"city": "上海"}
    assert [m["text"] for m in sent["messages"]] == [m.text for m in msgs]
    assert "facts_by_message" in fake_llm.requests[0]["messages"][0]["content"]
    await ex.aclose()


async def test_each_user_of_a_batch_gets_their_own_request(fake_llm: FakeLLM) -> None:
    ex = make_extractor(fake_llm)
    msgs = [*batch_of("我叫张三", owner="alice"), *batch_of("我叫李四", owner="bob")]
    await prepare_batch(ex, msgs, {"alice": {"city": "上海"}, "bob": {}})
    sent = sorted(
        (json.loads(r["messages"][-1]["content"]) for r in fake_llm.requests),
        key=lambda r: r["messages"][0]["text"],
    )
    assert [(r["known_facts"], [m["text"] for m in r["messages"]]) for r in sent] == [
        ({"city": "上海"}, ["我叫张三"]),
        ({}, ["我叫李四"]),
    ]
    await ex.aclose()


async def test_a_bad_or_missing_answer_sends_only_its_message_to_the_rules(
    fake_llm: FakeLLM,
) -> None:
    answer = {"facts_by_message": {"0": [{"key": "city", "value": "a\x00"}], "1": [FOCUS]}}
    fake_llm.script = [json.dumps(answer, ensure_ascii=False)]
    ex = make_extractor(fake_llm)
    msgs = batch_of("我叫张三", "重点关注续航和重量", "不要推荐游戏本")
    batch = await prepare_batch(ex, msgs, {})
    assert [(f.key, f.value) for f in await batch.extract(0, known={})] == [("name", "张三")]
    assert [f.key for f in await batch.extract(1, known={})] == ["focus"]  # the model's
    [ban] = await batch.extract(2, known={})  # left out of the answer: the rules'
    assert (ban.key, ban.value) == ("do_not_recommend", ["游戏本"])
    assert ex.stats.fallbacks == 2 and len(fake_llm.requests) == 1
    await ex.aclose()


async def test_an_unusable_batch_answer_sends_the_batch_to_the_rules(fake_llm: FakeLLM) -> None:
    fake_llm.script = [Raw(b"<html>oops</html>")]
    ex = make_extractor(fake_llm)
    batch = await prepare_batch(ex, batch_of("我叫张三", "不要推荐游戏本"), {})
    assert [f.key for f in await batch.extract(0, known={})] == ["name"]
    assert [f.key for f in await batch.extract(1, known={})] == ["do_not_recommend"]
    assert ex.stats.fallbacks == 2 and ex.stats.calls == 1
    await ex.aclose()


async def test_a_hanging_llm_costs_one_timeout_per_batch_then_is_skipped(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.script = [Sleep(10.0)] * 3
    ex = make_extractor(fake_llm, timeout_s=1.0)
    texts = [f"我预算不超过{n}千" for n in "一二三四五六七八"] * 2
    start = time.perf_counter()
    batch = await prepare_batch(ex, batch_of(*texts), {})
    facts = [await batch.extract(i, known={}) for i in range(len(texts))]
    elapsed = time.perf_counter() - start
    assert 0.9 < elapsed < 3.0, f"16 messages took {elapsed:.1f}s against a 1 s timeout"
    assert all(f and f[0].key == "budget_limit" for f in facts)  # the rules' budgets
    assert len(fake_llm.requests) == 1 and ex.stats.timeouts == 1 and ex.stats.fallbacks == 16
    # The same messages again (a redelivery) within the back-off: no call at all.
    start = time.perf_counter()
    again = await prepare_batch(ex, batch_of(*texts), {})
    assert [await again.extract(i, known={}) for i in range(len(texts))] == facts
    assert time.perf_counter() - start < 0.5
    assert len(fake_llm.requests) == 1 and ex.stats.skipped == 1
    await ex.aclose()


async def test_the_breaker_closes_after_its_back_off(fake_llm: FakeLLM) -> None:
    fake_llm.script = [Sleep(3.0), facts_json(FOCUS)]
    chat = ChatJSON(base_url=fake_llm.url, model=MODEL, timeout_s=0.3, breaker=Breaker(0.5))
    ex = LLMExtractor(chat)
    assert await rules_answered(ex) == RULES_BUDGET  # timed out
    assert await rules_answered(ex) == RULES_BUDGET  # skipped
    assert (len(fake_llm.requests), ex.stats.skipped) == (1, 1)
    await asyncio.sleep(0.6)
    assert [f.key for f in await ex.extract(SAID)] == ["focus"]  # the model again
    await ex.aclose()


def test_clients_built_from_settings_share_one_breaker(fake_llm: FakeLLM) -> None:
    settings = load_settings(extractor="llm", llm_url=fake_llm.url, llm_model=MODEL)
    a, b = ChatJSON.from_settings(settings), ChatJSON.from_settings(settings)
    assert a.breaker is b.breaker
    assert ChatJSON(base_url=fake_llm.url, model=MODEL).breaker is not a.breaker


# --- through ingest: never dead-lettered, one call per batch ---------------------------------


def llm_settings(settings: Settings, fake: FakeLLM, timeout_s: float = 5.0) -> Settings:
    return settings.model_copy(
        update={
            "extractor": "llm",
            "llm_url": fake.url,
            "llm_model": MODEL,
            "llm_timeout_s": timeout_s,
            "summariser": "extractive",
        }
    )


@pytest.mark.parametrize(
    "answers",
    [
        [Raw(b"<!doctype html><html><body>Service Unavailable</body></html>")],
        [facts_json({"key": "k" * 5000, "value": "x", "type": "profile"})],
        [facts_json({"key": "city", "value": "Ber\x00lin"})],
        [deep_answer(100_000), deep_answer(100_000)],
        [deep_answer(500)],
        [Raw(completion(facts_json(FOCUS), padding="x" * 20_000_000), "application/json")],
    ],
    ids=["html", "5000-char-key", "nul", "100k-deep", "500-deep", "20-MB"],
)
async def test_llm_garbage_never_dead_letters_and_the_rules_stand_in(
    service_settings: Settings, fake_llm: FakeLLM, answers: list[Step]
) -> None:
    fake_llm.script = list(answers)
    mem = await AsyncMemory.open(llm_settings(service_settings, fake_llm))
    try:
        u, s = new_id("u"), new_id("s")
        await mem.remember(u, s, "user", SAID)
        report = await mem.drain(summarize=False)
        assert (report.processed, report.failed, report.dead_lettered) == (1, 0, 0)
        assert [(f.key, f.value) for f in await mem.facts(u)] == RULES_BUDGET
        ctx = await mem.context(u, s, "我预算多少？")
        assert "5000 CNY" in ctx.text
    finally:
        await mem.close()


async def test_sixteen_messages_against_a_hanging_llm_cost_one_timeout(
    service_settings: Settings, fake_llm: FakeLLM
) -> None:
    fake_llm.script = [Sleep(30.0)] * 20
    mem = await AsyncMemory.open(llm_settings(service_settings, fake_llm, timeout_s=1.0))
    try:
        u, s = new_id("u"), new_id("s")
        for i in range(16):
            await mem.remember(u, s, "user", f"我预算不超过{1000 + i}元")
        start = time.perf_counter()
        report = await mem.drain(summarize=False)
        elapsed = time.perf_counter() - start
        assert report.processed == 16 and report.failed == 0
        assert elapsed < 4.0, f"16 messages took {elapsed:.1f}s against a 1 s timeout"
        assert len(fake_llm.requests) == 1
        facts = {f.key: f.value for f in await mem.facts(u)}
        assert facts["budget_limit"] == {"amount": 1015, "currency": "CNY"}  # the rules'
        assert len(await mem.fact_history(u, "budget_limit")) == 16
    finally:
        await mem.close()


# --- the personal keys, withdrawals, what the prompt asks for --------------------------------


def test_the_prompts_name_the_new_keys_shapes_and_rules() -> None:
    for prompt in (EXTRACT_PROMPT, BATCH_PROMPT):
        for word in ("diet", "allergies", "birthday", "family", "pets", '"retracts": true'):
            assert word in prompt, word
        assert '"MM-DD"' in prompt and "wife: Anna" in prompt
        assert 'never "peanut allergy"' in prompt
        assert "questions" in prompt and "hypotheticals" in prompt and "pasted" in prompt
        assert "Other people's facts" in prompt


async def test_valid_answers_for_the_new_keys_are_normalised(fake_llm: FakeLLM) -> None:
    fake_llm.script = [
        facts_json(
            {"key": "diet", "value": "vegetarian", "source": "user_stated"},
            {"key": "Allergic To", "value": "peanut allergy, shellfish"},
            {"key": "dob", "value": "March 3"},
            {"key": "family", "value": ["wife:Anna", "two kids"]},
            {"key": "dog", "value": "Biscuit"},  # a relation/animal key is the item's label
        )
    ]
    ex = make_extractor(fake_llm)
    text = "I'm vegetarian, allergic to peanuts and shellfish; born March 3; wife Anna, two kids"
    facts = {f.key: f for f in await ex.extract(text)}
    assert {k: f.value for k, f in facts.items()} == {
        "diet": "vegetarian",
        "allergies": ["peanut", "shellfish"],
        "birthday": "03-03",
        "family": ["wife: Anna", "two kids"],
        "pets": ["dog: Biscuit"],
    }
    assert {k: f.type for k, f in facts.items()} == {
        "diet": "profile",
        "allergies": "constraint",
        "birthday": "profile",
        "family": "profile",
        "pets": "profile",
    }
    assert not any(f.retracts for f in facts.values())
    assert ex.stats.fallbacks == 0
    await ex.aclose()


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("1990-10-08", "1990-10-08"),
        ("10/08", "10-08"),
        ("March 3", "03-03"),
        ("3rd of March 1990", "1990-03-03"),
        ("十月八号", "10-08"),
        ("1990年10月8日", "1990-10-08"),
        ({"month": 2, "day": 29}, "02-29"),
    ],
)
async def test_birthdays_as_a_model_may_write_them(
    fake_llm: FakeLLM, said: Any, stored: str
) -> None:
    fake_llm.script = [facts_json({"key": "birthday", "value": said})]
    ex = make_extractor(fake_llm)
    [fact] = await ex.extract("my birthday")
    assert (fact.key, fact.value) == ("birthday", stored)
    await ex.aclose()


async def test_a_birthday_that_is_no_date_is_left_out(fake_llm: FakeLLM) -> None:
    # Unusable like an amount without a number: only that fact goes, not the answer.
    fake_llm.script = [facts_json({"key": "birthday", "value": "1990-02-29"}, FOCUS)]
    ex = make_extractor(fake_llm)
    assert [f.key for f in await ex.extract("重点关注续航和重量")] == ["focus"]
    assert ex.stats.fallbacks == 0
    await ex.aclose()


async def test_a_retraction_is_carried_to_the_fact(fake_llm: FakeLLM) -> None:
    fake_llm.script = [
        facts_json(
            {"key": "diet", "value": "vegetarian", "retracts": True, "source": "user_stated"},
            # A withdrawal may name nothing, and needs no type even for an unknown key.
            {"key": "gym_membership", "value": None, "retracts": True},
            {"key": "city", "value": "Berlin", "retracts": None},  # null reads as false
        )
    ]
    ex = make_extractor(fake_llm)
    known = {"diet": "vegetarian", "gym_membership": "FitX"}
    facts = {
        f.key: f for f in await ex.extract("not vegetarian anymore, quit the gym", known=known)
    }
    assert (facts["diet"].retracts, facts["diet"].value) == (True, "vegetarian")
    assert (facts["gym_membership"].retracts, facts["gym_membership"].value) == (True, None)
    assert (facts["city"].retracts, facts["city"].value) == (False, "Berlin")
    assert ex.stats.fallbacks == 0
    await ex.aclose()


@pytest.mark.parametrize(
    ("withdrawn", "value", "retracts"),
    [
        (["Tom"], ["dog: Rex"], False),  # part of the list went: the rest is the value
        (["the cat"], ["dog: Rex"], False),
        (["cat: Tom", "dog"], ["cat: Tom", "dog"], True),  # all of it: the key ends
        (["parrot"], ["cat: Tom", "dog: Rex"], False),  # none of it: nothing changes
    ],
)
async def test_a_list_retraction_is_related_to_the_known_list(
    fake_llm: FakeLLM, withdrawn: list[str], value: list[str], retracts: bool
) -> None:
    fake_llm.script = [facts_json({"key": "pets", "value": withdrawn, "retracts": True})]
    ex = make_extractor(fake_llm)
    known = {"pets": ["cat: Tom", "dog: Rex"]}
    [fact] = await ex.extract("Tom passed away", known=known)
    assert (fact.key, fact.value, fact.retracts) == ("pets", value, retracts)
    assert fact.supersedes == (known["pets"] if len(value) == 1 else None)
    await ex.aclose()


@pytest.mark.parametrize(
    "answer",
    [
        facts_json({"key": "pets", "value": "cat", "retracts": "perhaps"}, FOCUS),
        facts_json({"key": "diet", "value": ""}, FOCUS),  # empty and no withdrawal
        '{"facts": {"diet": "vegetarian"}}',  # facts is no list
    ],
    ids=["retracts-not-a-bool", "empty-value", "facts-not-a-list"],
)
async def test_garbage_answers_about_the_new_keys_send_the_message_to_the_rules(
    fake_llm: FakeLLM, answer: str
) -> None:
    fake_llm.script = [answer, answer]
    ex = make_extractor(fake_llm)
    assert await rules_answered(ex) == RULES_BUDGET
    assert ex.stats.fallbacks == 1
    await ex.aclose()


async def test_a_timeout_leaves_the_rules_and_no_withdrawal(fake_llm: FakeLLM) -> None:
    # The model's retraction arrives too late: the rules read the message instead.
    fake_llm.script = [Sleep(3.0, facts_json({"key": "budget", "value": None, "retracts": True}))]
    ex = make_extractor(fake_llm, timeout_s=0.3)
    facts = await ex.extract(SAID, known={"budget_limit": {"amount": 9000, "currency": "CNY"}})
    assert [(f.key, f.value["amount"], f.retracts) for f in facts] == [
        ("budget_limit", 5000, False)
    ]
    assert ex.stats.timeouts == 1 and ex.stats.fallbacks == 1
    await ex.aclose()


async def test_new_keys_and_a_withdrawal_through_ingest(
    service_settings: Settings, fake_llm: FakeLLM
) -> None:
    # One batch: the first message states, the second withdraws the diet and one pet.
    answer = {
        "facts_by_message": {
            "0": [
                {"key": "diet", "value": "素食", "source": "user_stated"},
                {"key": "pets", "value": ["布偶猫: 雪球", "柯基"], "source": "user_stated"},
                {"key": "生日", "value": "3月3日", "source": "user_stated"},
            ],
            "1": [
                {"key": "diet", "value": "素食", "retracts": True, "source": "user_stated"},
                {"key": "pets", "value": ["雪球"], "retracts": True, "source": "user_stated"},
            ],
        }
    }
    fake_llm.script = [json.dumps(answer, ensure_ascii=False)]
    mem = await AsyncMemory.open(llm_settings(service_settings, fake_llm))
    try:
        u, s = new_id("u"), new_id("s")
        await mem.remember(u, s, "user", "我吃素，养了一只布偶猫雪球和一只柯基，生日3月3日")
        second = await mem.remember(u, s, "user", "不过现在不吃素了，雪球上个月走了")
        report = await mem.drain(summarize=False)
        assert (report.processed, report.failed) == (2, 0)
        assert {f.key: f.value for f in await mem.facts(u)} == {
            "pets": ["柯基"],
            "birthday": "03-03",
        }
        [diet] = await mem.fact_history(u, "diet")
        assert diet.value == "素食" and diet.ended_by_msg_id == second
        assert len(fake_llm.requests) == 1
    finally:
        await mem.close()


async def test_an_unknown_key_is_kept_snake_cased_with_its_value_as_given(
    service_settings: Settings, fake_llm: FakeLLM
) -> None:
    # docs/facts.md: keys outside the table are kept, lower-cased and snake_cased, their
    # value stored as given; a key that is no safe id sends the message to the rules.
    answer = {
        "facts_by_message": {
            "0": [{"key": "Shoe Size", "value": {"eu": 42, "fit": "wide"}, "type": "profile"}],
            "1": [{"key": "通勤时间", "value": "一小时", "type": "profile"}],
        }
    }
    fake_llm.script = [json.dumps(answer, ensure_ascii=False)]
    mem = await AsyncMemory.open(llm_settings(service_settings, fake_llm))
    try:
        u, s = new_id("u"), new_id("s")
        await mem.remember(u, s, "user", "I wear EU 42, wide fit")
        await mem.remember(u, s, "user", SAID)
        await mem.drain(summarize=False)
        facts = {f.key: (f.value, f.type) for f in await mem.facts(u)}
        assert facts == {
            "shoe_size": ({"eu": 42, "fit": "wide"}, "profile"),
            "budget_limit": ({"amount": 5000, "currency": "CNY"}, "constraint"),  # the rules'
        }
    finally:
        await mem.close()


@pytest.mark.parametrize("retraction_first", [True, False])
async def test_a_withdrawal_never_undoes_a_value_of_the_same_message(
    fake_llm: FakeLLM, retraction_first: bool
) -> None:
    withdrawn: dict[str, Any] = {"key": "diet", "value": "vegetarian", "retracts": True}
    stated: dict[str, Any] = {"key": "diet", "value": "vegan"}
    pair = [withdrawn, stated] if retraction_first else [stated, withdrawn]
    fake_llm.script = [facts_json(*pair)]
    ex = make_extractor(fake_llm)
    facts = await ex.extract("not vegetarian anymore, vegan now", known={"diet": "vegetarian"})
    assert [(f.key, f.value, f.retracts, f.supersedes) for f in facts] == [
        ("diet", "vegan", False, "vegetarian")
    ]
    await ex.aclose()
