"""Token counts and lexical terms, in English and Chinese."""

from __future__ import annotations

from memstack.text.terms import lexical_terms
from memstack.text.token_counts import count_tokens


def test_counts_are_cl100k_tokens() -> None:
    # Known cl100k_base encodings: "hello world" is two tokens, the empty string none.
    assert count_tokens("hello world") == 2
    assert count_tokens("") == 0
    english = "Hey Caroline! Good to see you! I'm swamped with the kids & work."
    chinese = "我想买一台轻薄笔记本，我预算不超过五千。"
    # Chinese costs more than one token per character on average; English less than
    # one token per character and about one per word.
    assert len(chinese) < count_tokens(chinese) < 2 * len(chinese)
    assert len(english.split()) <= count_tokens(english) < len(english) / 2


def test_lexical_terms_segment_chinese_and_stem_english() -> None:
    assert lexical_terms("我们做支付清结算系统，痛点是结算延迟") == [
        "做",
        "支付",
        "清",
        "结算",
        "系统",
        "痛点",
        "结算",
        "延迟",
    ]
    assert lexical_terms("I'm painting dogs with Caroline's friends in 2023") == [
        "paint",
        "dog",
        "caroline",
        "friend",
        "2023",
    ]
