"""Assembly order and labels (docs/spec.md, Read path), zh and en."""

from __future__ import annotations

import pytest

from memstack.core.errors import ValidationError
from memstack.recall.assembly import (
    EN,
    ZH,
    assemble,
    labels_for,
    relative_age,
    render_fact,
    render_history,
)
from tests.messages import turn

DAY = 86400


def test_fact_line_reads_like_the_spec() -> None:
    line = render_fact("budget_limit", {"amount": 8000, "currency": "CNY"}, "user_stated", ZH)
    assert line == "- 预算上限：8000 CNY（用户明确说明）"
    line = render_fact("focus", ["battery", "weight"], "extract", EN)
    assert line == "- Focus: battery, weight (extracted from the dialogue)"


@pytest.mark.parametrize(
    ("age_s", "zh", "en"),
    [
        (3 * DAY + 5, "3天前", "3 days ago"),
        (DAY, "1天前", "1 day ago"),
        (5 * 3600, "5小时前", "5 hours ago"),
        (90 * DAY, "3个月前", "3 months ago"),
        (800 * DAY, "2年前", "2 years ago"),
        (-50, "刚刚", "just now"),
    ],
)
def test_relative_age(age_s: float, zh: str, en: str) -> None:
    assert relative_age(age_s, ZH) == zh
    assert relative_age(age_s, EN) == en


def test_history_line_has_its_age() -> None:
    line = render_history(3 * DAY, [("user", "通勤时间较长，希望轻便")], ZH)
    assert line == "- [3天前] 用户：通勤时间较长，希望轻便"


@pytest.mark.parametrize("labels", [ZH, EN])
def test_sections_come_in_the_spec_order(labels) -> None:  # type: ignore[no-untyped-def]
    out = assemble(
        labels=labels,
        system="SYSTEM",
        facts=["- FACT"],
        knowledge=["KNOWLEDGE"],
        history=["- [3天前] HISTORY"],
        recent=[turn("user", "RECENT-Q"), turn("assistant", "RECENT-A")],
        query="QUERY",
    )
    order = [
        "SYSTEM",
        labels.facts,
        "FACT",
        labels.knowledge,
        "KNOWLEDGE",
        labels.history,
        "HISTORY",
        labels.recent,
        "RECENT-Q",
        "RECENT-A",
        labels.input,
        "QUERY",
    ]
    positions = [out.text.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert (
        "仅供参考，可能不完整" if labels is ZH else "for reference, may be incomplete"
    ) in out.text


def test_empty_sections_are_left_out_and_messages_are_chat_ready() -> None:
    out = assemble(
        labels=EN,
        system="SYSTEM",
        history=["- [1 day ago] user: hi"],
        recent=[turn("user", "q1"), turn("assistant", "a1"), turn("tool", "42")],
        query="what now?",
    )
    assert EN.facts not in out.text and EN.knowledge not in out.text
    assert out.messages[0]["role"] == "system"
    assert EN.history in out.messages[0]["content"]
    assert [m["role"] for m in out.messages[1:]] == ["user", "assistant", "assistant", "user"]
    assert out.messages[3]["content"] == "[tool] 42"
    assert out.messages[-1] == {"role": "user", "content": "what now?"}


def test_unknown_locale_is_refused() -> None:
    with pytest.raises(ValidationError, match="locale"):
        labels_for("fr")


def test_history_items_of_one_age_share_their_header() -> None:
    from memstack.recall.assembly import render_history_groups

    lines = render_history_groups(
        [("- [3天前]", "用户：甲"), ("- [3天前]", "助手：乙"), ("- [1天前]", "用户：丙")]
    )
    assert lines == ["- [3天前]", "  用户：甲", "  助手：乙", "- [1天前] 用户：丙"]
