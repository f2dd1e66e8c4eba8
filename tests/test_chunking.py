from __future__ import annotations

import random
import re

import pytest

from memstack.text.chunking import Unit, exchange_units, split_semantic
from tests.messages import said

ZH_SENTENCE = "我们比较了三款笔记本电脑的续航和重量。"  # 19 characters
EN_SENTENCE = "We compared the battery life of three laptops. "  # 47 characters


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _paragraph(sentence: str, chars: int) -> str:
    return (sentence * (chars // len(sentence) + 1))[:chars].strip()


def test_short_text_comes_back_whole_and_stripped() -> None:
    assert split_semantic("  预算五千元。\n") == ["预算五千元。"]
    assert split_semantic("Budget is 5000.") == ["Budget is 5000."]


def test_empty_text_gives_no_pieces() -> None:
    assert split_semantic("") == []
    assert split_semantic(" \n\n\t ") == []


@pytest.mark.parametrize("sentence", [ZH_SENTENCE, EN_SENTENCE], ids=["zh", "en"])
def test_long_text_splits_at_paragraphs(sentence: str) -> None:
    paragraphs = [
        _paragraph(sentence, 300),
        _paragraph(sentence[::-1], 280),
        _paragraph(sentence, 200),
    ]
    assert split_semantic("\n\n".join(paragraphs)) == paragraphs


def test_text_within_the_limit_is_not_split_at_paragraphs() -> None:
    text = _paragraph(ZH_SENTENCE, 200) + "\n\n" + _paragraph(ZH_SENTENCE, 200)
    assert split_semantic(text) == [text]


@pytest.mark.parametrize(
    ("sentence", "ends"), [(ZH_SENTENCE, "。"), (EN_SENTENCE, ".")], ids=["zh", "en"]
)
def test_long_paragraph_splits_at_sentences(sentence: str, ends: str) -> None:
    text = sentence * 60  # ~1100-2800 characters, one paragraph
    pieces = split_semantic(text)
    assert len(pieces) >= 3
    for piece in pieces:
        assert len(piece) <= 500
        assert piece.endswith(ends), piece[-20:]
        assert piece.startswith(sentence.strip()[:5])
    assert _squash("".join(pieces)) == _squash(text)


def test_sentence_split_balances_pieces_instead_of_leaving_a_stub() -> None:
    pieces = split_semantic(ZH_SENTENCE * 30)  # 570 characters
    assert len(pieces) == 2
    assert min(len(p) for p in pieces) >= 200


def test_chinese_sentence_ends_include_exclamation_question_and_semicolon() -> None:
    text = "这是第一句！" * 40 + "这是第二句？" * 40 + "这是第三句；" * 40
    pieces = split_semantic(text, split_chars=100)
    assert all(len(p) <= 100 and p[-1] in "！？；" for p in pieces)


def test_english_decimal_point_is_not_a_sentence_end() -> None:
    text = "Version 3.5 of the planner costs 12.75 dollars per seat and ships today. " * 20
    pieces = split_semantic(text, split_chars=200)
    assert all(p.endswith("today.") for p in pieces)


def test_short_piece_merges_with_a_neighbour() -> None:
    long_a, tiny, long_b = _paragraph(EN_SENTENCE, 300), "OK, noted.", _paragraph(EN_SENTENCE, 300)
    pieces = split_semantic(f"{long_a}\n\n{tiny}\n\n{long_b}")
    assert len(pieces) == 2
    assert all(len(p) >= 50 for p in pieces)
    assert any(tiny in p for p in pieces)


def test_merge_never_exceeds_the_limit() -> None:
    long_a, tiny, long_b = _paragraph(ZH_SENTENCE, 498), "好的。", _paragraph(ZH_SENTENCE, 498)
    pieces = split_semantic(f"{long_a}\n\n{tiny}\n\n{long_b}")
    assert pieces == [long_a, tiny, long_b]


def test_text_without_any_boundary_is_cut_hard_into_equal_pieces() -> None:
    text = "x" * 1234
    pieces = split_semantic(text)
    assert [len(p) for p in pieces] == [412, 412, 410]
    assert "".join(pieces) == text


def test_text_without_punctuation_is_cut_between_words() -> None:
    words = [f"word{i}" for i in range(300)]
    pieces = split_semantic(" ".join(words), split_chars=100)
    assert all(len(p) <= 100 for p in pieces)
    assert [w for p in pieces for w in p.split()] == words


def test_merge_chars_zero_disables_merging() -> None:
    text = _paragraph(EN_SENTENCE, 300) + "\n\n" + _paragraph(EN_SENTENCE, 300) + "\n\nOK."
    assert split_semantic(text, merge_chars=0)[-1] == "OK."
    merged = split_semantic(text)
    assert len(merged) == 2
    assert merged[-1].endswith("\n\nOK.")


@pytest.mark.parametrize("bad", [{"split_chars": 0}, {"merge_chars": -1}])
def test_bad_limits_raise(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        split_semantic("text", **bad)


def test_random_mixed_text_keeps_every_character_and_the_limit() -> None:
    rng = random.Random(7)
    pool = [
        ZH_SENTENCE,
        EN_SENTENCE,
        "预算改成八千元；",
        "OK! ",
        "Why? ",
        "很好",
        "x" * 120,
        "\n",
        "\n\n",
    ]
    for _ in range(200):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 120)))
        limit = rng.choice([80, 200, 500])
        pieces = split_semantic(text, split_chars=limit, merge_chars=min(50, limit // 4))
        assert _squash("".join(pieces)) == _squash(text)
        assert all(0 < len(p) <= limit for p in pieces)
        assert all(p == p.strip() for p in pieces)


# --- exchange units -----------------------------------------------------------------------


def test_user_turn_and_its_reply_form_one_unit() -> None:
    units = exchange_units(
        said(
            [
                ("m1", "user", "我预算五千。"),
                ("m2", "assistant", "好的，记下了。"),
                ("m3", "user", "Actually make it 8000."),
                ("m4", "assistant", "Updated to 8000."),
            ]
        )
    )
    assert units == [
        Unit(("m1", "m2"), "user: 我预算五千。\nassistant: 好的，记下了。"),
        Unit(("m3", "m4"), "user: Actually make it 8000.\nassistant: Updated to 8000."),
    ]


def test_every_user_turn_starts_a_unit_and_tool_results_join_it() -> None:
    units = exchange_units(
        said(
            [
                ("m1", "user", "Find flights"),
                ("m2", "user", "to Tokyo"),
                ("m3", "assistant", "Searching"),
                ("m4", "tool", "3 results"),
                ("m5", "assistant", "Found 3."),
                ("m6", "user", "Book the first"),
            ]
        )
    )
    assert [u.msg_ids for u in units] == [("m1",), ("m2", "m3", "m4", "m5"), ("m6",)]
    assert units[1].text.splitlines()[2] == "tool: 3 results"


def test_a_unit_holds_at_most_lookback_replies_then_each_stands_alone() -> None:
    msgs = [("q", "user", "question")] + [(f"r{i}", "assistant", f"part {i}") for i in range(6)]
    units = exchange_units(said(msgs), lookback=4)
    assert [u.msg_ids for u in units] == [("q", "r0", "r1", "r2", "r3"), ("r4",), ("r5",)]


def test_messages_before_the_first_user_turn_are_their_own_unit() -> None:
    units = exchange_units(
        said(
            [
                ("m0", "assistant", "Hello!"),
                ("m0b", "assistant", "How can I help?"),
                ("m1", "user", "Hi"),
                ("m2", "assistant", "Hey"),
            ]
        )
    )
    assert [u.msg_ids for u in units] == [("m0",), ("m0b",), ("m1", "m2")]


def test_blank_content_keeps_its_id_but_adds_no_line() -> None:
    units = exchange_units(said([("m1", "user", "question"), ("m2", "assistant", "   ")]))
    assert units == [Unit(("m1", "m2"), "user: question")]


def test_no_messages_no_units() -> None:
    assert exchange_units([]) == []


def test_a_named_message_reads_name_colon_content_and_groups_by_role() -> None:
    units = exchange_units(
        said(
            [
                ("m1", "user", "I moved to Lisbon.", "Tim"),
                ("m2", "assistant", "Noted.", "Bot"),
                ("m3", "user", "Since when?", "Joanna"),
                ("m4", "user", "Back to work.", None),
            ]
        )
    )
    # A named assistant still replies to the user turn before it: grouping follows the role.
    assert units == [
        Unit(("m1", "m2"), "Tim: I moved to Lisbon.\nBot: Noted."),
        Unit(("m3",), "Joanna: Since when?"),
        Unit(("m4",), "user: Back to work."),
    ]
