"""The LLM extractor against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memstack.extraction import (
    ChatJSON,
    LLMExtractor,
    RulesExtractor,
    build_extractor,
)
from memstack.extraction.llm import json_payload
from memstack.settings import load_settings

MODEL = "test-model-7b"


@dataclass
class Sleep:
    seconds: float
    then: str = '{"facts": []}'


@dataclass
class Status:
    code: int


Step = str | Sleep | Status


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


async def test_invalid_fields_count_as_malformed(fake_llm: FakeLLM) -> None:
    bad = facts_json({"key": "mood", "value": "happy"})  # unknown key without a type
    worse = facts_json({"key": "budget", "value": 5000, "confidence": 7})
    fake_llm.script = [bad, worse]
    ex = make_extractor(fake_llm)
    facts = await ex.extract("我预算不超过五千")
    assert facts[0].source == "user_stated" and facts[0].value["amount"] == 5000
    assert ex.stats.malformed == 2 and ex.stats.fallbacks == 1
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
