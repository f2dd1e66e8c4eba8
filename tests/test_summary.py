"""Session summaries: the extractive summariser and the LLM one with its fallback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memstack.core.identity import UserIdentity
from memstack.core.settings import load_settings
from memstack.ingest.extraction import ChatJSON, Fact
from memstack.ingest.summarisers import (
    ExtractiveSummariser,
    LLMSummariser,
    SessionSummary,
    build_summariser,
    compromise_in,
    topic_code,
)
from tests.messages import said

MODEL = "summary-model"

# A device-selection session in which the budget moves from 5000 to 8000.
CONVERSATION: list[tuple[str, str, str]] = [
    ("m01", "user", "你好，我想买一台笔记本电脑。"),
    ("m02", "assistant", "您好！请问您的预算大概是多少？主要用途是什么？"),
    ("m03", "user", "我预算不超过五千，主要是出差办公用。"),
    ("m04", "assistant", "好的，五千以内可以考虑几款轻薄本。"),
    ("m05", "user", "我经常出差，重点关注续航和重量。"),
    ("m06", "assistant", "明白，续航和重量是出差本的关键。"),
    ("m07", "user", "不要推荐游戏本，太重了。ThinkPad X1重吗？"),
    ("m08", "assistant", "ThinkPad X1 大约 1.1 公斤，很轻。不会给您推荐游戏本。"),
    ("m09", "user", "我叫李雷，在上海工作。"),
    ("m10", "assistant", "李雷您好，上海有很多线下门店可以体验。"),
    ("m11", "user", "其实我可以到八千，如果续航明显更好的话。"),
    ("m12", "assistant", "八千的预算选择会多很多，比如MacBook Air，它支持快充。"),
    ("m13", "user", "MacBook Air的续航能到多少小时？"),
    ("m14", "user", "另外，是否需要支持扩展存储？"),
]
USER_TEXT = [c for _, r, c in CONVERSATION if r == "user"]
BUDGET_5000 = {"amount": 5000, "currency": "CNY"}
BUDGET_8000 = {"amount": 8000, "currency": "CNY"}


def facts_by_key(summary: SessionSummary) -> dict[str, Fact]:
    keys = [f.key for f in summary.facts]
    assert len(keys) == len(set(keys)), f"current values only, one per key: {keys}"
    return {f.key: f for f in summary.facts}


# --- extractive ---------------------------------------------------------------------------


async def test_extractive_keeps_the_current_budget_not_a_range() -> None:
    s = await ExtractiveSummariser().summarise(said(CONVERSATION))
    facts = facts_by_key(s)
    budget = facts["budget_limit"]
    assert budget.value == BUDGET_8000
    assert budget.supersedes == BUDGET_5000
    assert budget.override is True
    assert facts["do_not_recommend"].value == ["游戏本"]
    assert facts["focus"].value == ["续航", "重量"]
    assert facts["name"].value == "李雷"
    assert facts["city"].value == "上海"

    # The number and the negation survive in the text; the replaced value does not,
    # and nothing reads as a compromise.
    assert "八千" in s.summary
    assert "不要推荐游戏本" in s.summary
    assert "五千" not in s.summary
    assert "到八千" not in s.summary.replace("可以到八千", "")
    assert len(s.summary) <= 300


async def test_extractive_summary_is_only_user_sentences() -> None:
    s = await ExtractiveSummariser().summarise(said(CONVERSATION))
    user_blob = "".join(USER_TEXT)
    for sentence in s.summary.split("。"):
        assert sentence.strip("。？！") in user_blob, sentence
    assert "快充" not in s.summary  # said by the assistant only
    assert all(f.source != "inferred" for f in s.facts)


async def test_extractive_open_questions_are_the_unanswered_ones() -> None:
    s = await ExtractiveSummariser().summarise(said(CONVERSATION))
    assert s.open_questions == ["MacBook Air的续航能到多少小时？", "另外，是否需要支持扩展存储？"]
    assert all("ThinkPad X1重吗" not in q for q in s.open_questions)  # answered in m08


async def test_a_deferral_is_not_an_answer() -> None:
    msgs: list[tuple[str, str, str]] = [
        ("a", "user", "这款支持雷电4吗？"),
        ("b", "assistant", "这个我需要确认一下，稍后回复您。"),
        ("c", "user", "好的"),
    ]
    assert (await ExtractiveSummariser().summarise(said(msgs))).open_questions == [
        "这款支持雷电4吗？"
    ]


async def test_extractive_topic_and_serialisation() -> None:
    s = await ExtractiveSummariser().summarise(said(CONVERSATION))
    assert s.topic == "方案讨论"
    assert topic_code(s.topic) == "plan"
    dumped = s.model_dump(mode="json")
    assert set(dumped) == {"facts", "summary", "open_questions", "topic"}
    assert dumped["facts"][0]["key"]


@pytest.mark.parametrize(
    ("messages", "topic"),
    [
        (
            [("a", "user", "你好呀"), ("b", "assistant", "你好！"), ("c", "user", "今天天气真好")],
            "闲聊",
        ),
        ([("a", "user", "打印机一直报错，连不上网络，已经坏了两天了")], "问题反馈"),
        ([("a", "user", "我喜欢安静的咖啡馆，讨厌排队")], "偏好声明"),
        ([("a", "user", "The app keeps crashing with an error since the update.")], "issue report"),
        ([("a", "user", "Hello there!"), ("b", "user", "Nice weather today.")], "small talk"),
    ],
)
async def test_topic_table(messages: list[tuple[str, str, str]], topic: str) -> None:
    assert (await ExtractiveSummariser().summarise(said(messages))).topic == topic


async def test_small_talk_gives_no_facts_and_no_summary() -> None:
    s = await ExtractiveSummariser().summarise(
        said(
            [
                ("a", "user", "你好"),
                ("b", "assistant", "你好！有什么可以帮您？"),
                ("c", "user", "谢谢"),
            ]
        )
    )
    assert s.facts == [] and s.summary == "" and s.open_questions == []


async def test_english_session() -> None:
    msgs: list[tuple[str, str, str]] = [
        ("1", "user", "I need a laptop. My budget is at most $5,000."),
        ("2", "assistant", "Sure, what matters to you?"),
        ("3", "user", "I care most about battery life. Do not recommend gaming laptops."),
        ("4", "assistant", "Noted."),
        ("5", "user", "Actually, I can go up to $8,000. Which one is lightest?"),
    ]
    s = await ExtractiveSummariser().summarise(said(msgs))
    facts = facts_by_key(s)
    assert facts["budget_limit"].value == {"amount": 8000, "currency": "USD"}
    assert facts["budget_limit"].supersedes == {"amount": 5000, "currency": "USD"}
    assert "$8,000" in s.summary and "Do not recommend gaming laptops." in s.summary
    assert "$5,000" not in s.summary
    assert s.open_questions == ["Which one is lightest?"]
    assert s.topic == "plan discussion"


async def test_summary_length_is_bounded() -> None:
    msgs: list[tuple[str, str, str]] = [
        (
            f"m{i}",
            "user",
            f"第{i}个要求：不要推荐{i}号商家的产品，价格不超过{i}千元，这一点非常重要。",
        )
        for i in range(1, 41)
    ]
    s = await ExtractiveSummariser(max_chars=300).summarise(said(msgs))
    assert 100 < len(s.summary) <= 300


async def test_known_facts_are_superseded_across_sessions() -> None:
    s = await ExtractiveSummariser().summarise(
        said([("a", "user", "预算改成一万二")]), known={"budget": 8000}
    )
    budget = facts_by_key(s)["budget_limit"]
    assert budget.value == {"amount": 12000, "currency": "CNY"}
    assert budget.supersedes == BUDGET_8000


def test_compromise_detector() -> None:
    fact = Fact(
        key="budget_limit",
        value=BUDGET_8000,
        type="constraint",
        confidence=0.9,
        source="user_stated",
        supersedes=BUDGET_5000,
    )
    assert compromise_in("用户预算约五千到八千元。", [fact]) == "五千到八千"
    assert compromise_in("Budget is 5000-8000 CNY.", [fact]) == "5000-8000"
    assert compromise_in("预算从五千改为八千。", [fact]) is None
    assert compromise_in("预算八千。", [fact]) is None


# --- LLM -------------------------------------------------------------------------------------


@dataclass
class FakeLLM:
    url: str = ""
    script: list[str | float] = field(default_factory=list)  # a float: sleep that long
    requests: list[dict[str, Any]] = field(default_factory=list)


def _handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append(body)
            step = fake.script.pop(0) if fake.script else "{}"
            if isinstance(step, float):
                time.sleep(step)
                step = "{}"
            data = json.dumps(
                {
                    "id": "c",
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
                },
                ensure_ascii=False,
            ).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    fake = FakeLLM()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.block_on_close = False
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield fake
    server.shutdown()
    server.server_close()


def llm_summariser(fake: FakeLLM, timeout_s: float = 5.0) -> LLMSummariser:
    return LLMSummariser(ChatJSON(base_url=fake.url, model=MODEL, timeout_s=timeout_s))


GOOD = {
    "facts": [
        {
            "key": "预算",
            "value": {"amount": 8000, "currency": "CNY"},
            "type": "constraint",
            "confidence": 0.95,
            "source": "user_stated",
            "supersedes": {"amount": 5000, "currency": "CNY"},
            "override": True,
        },
        {
            "key": "priorities",
            "value": ["续航", "重量"],
            "type": "preference",
            "source": "user_stated",
        },
    ],
    "summary": "李雷在上海工作，选购出差用笔记本，预算从五千改为八千，"
    "重点关注续航和重量，不要推荐游戏本。",
    "open_questions": ["是否需要支持扩展存储？"],
    "topic": "方案讨论",
}


async def test_llm_summary_is_parsed_and_normalised(fake_llm: FakeLLM) -> None:
    fake_llm.script = ["```json\n" + json.dumps(GOOD, ensure_ascii=False) + "\n```"]
    summ = llm_summariser(fake_llm)
    s = await summ.summarise(said(CONVERSATION))
    facts = facts_by_key(s)
    assert facts["budget_limit"].value == BUDGET_8000
    assert facts["budget_limit"].supersedes == BUDGET_5000
    assert facts["focus"].value == ["续航", "重量"]
    # The model dropped the ban; the rules found it, so it is kept.
    assert facts["do_not_recommend"].value == ["游戏本"]
    assert s.summary == GOOD["summary"]
    assert s.open_questions == ["是否需要支持扩展存储？"]
    assert s.topic == "方案讨论"
    assert summ.stats.retries == 0 and summ.stats.fallbacks == 0

    req = fake_llm.requests[0]
    assert req["model"] == MODEL
    sent = json.loads(req["messages"][-1]["content"])
    assert [m["id"] for m in sent["messages"]] == [m[0] for m in CONVERSATION]
    assert sent["messages"][10]["content"] == "其实我可以到八千，如果续航明显更好的话。"
    assert "compromise" in req["messages"][0]["content"]
    await summ.aclose()


async def test_llm_compromise_summary_is_retried(fake_llm: FakeLLM) -> None:
    compromise = dict(GOOD, summary="用户预算约五千到八千元，关注续航。")
    fake_llm.script = [
        json.dumps(compromise, ensure_ascii=False),
        json.dumps(GOOD, ensure_ascii=False),
    ]
    summ = llm_summariser(fake_llm)
    s = await summ.summarise(said(CONVERSATION))
    assert s.summary == GOOD["summary"]
    assert summ.stats.retries == 1
    assert "五千到八千" in fake_llm.requests[1]["messages"][-1]["content"]  # the model is told why
    await summ.aclose()


async def test_llm_malformed_twice_falls_back_to_extractive(fake_llm: FakeLLM) -> None:
    fake_llm.script = ["{not json", json.dumps({"facts": [], "summary": ""})]
    summ = llm_summariser(fake_llm)
    s = await summ.summarise(said(CONVERSATION))
    assert s == await ExtractiveSummariser().summarise(said(CONVERSATION))
    assert summ.stats.fallbacks == 1 and summ.stats.retries == 1
    await summ.aclose()


async def test_llm_timeout_falls_back_quickly(fake_llm: FakeLLM) -> None:
    fake_llm.script = [3.0]
    summ = llm_summariser(fake_llm, timeout_s=0.3)
    start = time.perf_counter()
    s = await summ.summarise(said(CONVERSATION))
    assert time.perf_counter() - start < 1.5
    assert facts_by_key(s)["budget_limit"].value == BUDGET_8000
    assert summ.stats.timeouts == 1 and summ.stats.fallbacks == 1
    await summ.aclose()


def test_build_summariser(fake_llm: FakeLLM) -> None:
    assert isinstance(build_summariser(load_settings()), ExtractiveSummariser)
    assert isinstance(build_summariser(load_settings(llm_url=fake_llm.url)), LLMSummariser)


async def test_llm_summary_request_names_the_authors(fake_llm: FakeLLM) -> None:
    fake_llm.script = [json.dumps(GOOD, ensure_ascii=False)]
    summ = llm_summariser(fake_llm)
    await summ.summarise(
        said(
            [
                ("m1", "user", "我预算不超过五千。", "Tim"),
                ("m2", "assistant", "好的。"),
                ("m3", "user", "我也想要轻一点的。", None),
            ]
        )
    )
    sent = json.loads(fake_llm.requests[0]["messages"][-1]["content"])["messages"]
    assert sent[0] == {"id": "m1", "role": "user", "content": "我预算不超过五千。", "name": "Tim"}
    assert "name" not in sent[1] and "name" not in sent[2]
    await summ.aclose()


async def test_extractive_summary_reads_only_the_users_own_words() -> None:
    named = [(i, r, c, "Tim" if r == "user" else None) for i, r, c in CONVERSATION]
    plain = await ExtractiveSummariser().summarise(said(CONVERSATION))
    assert plain.facts and plain.summary
    # Tim bound to the user: his messages are the user's own.
    tim = UserIdentity("u", display_name="Tim")
    assert await ExtractiveSummariser().summarise(said(named), speaker=tim) == plain
    # Tim is someone else: nothing he says becomes the user's facts or quoted sentences.
    other = await ExtractiveSummariser().summarise(said(named))
    assert other.facts == [] and other.summary == ""
