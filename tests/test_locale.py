"""MEMSTACK_LOCALE=auto: the labels of the assembled context follow the question's language."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack import AsyncMemory, ConfigError, ValidationError
from memstack.text.locales import resolve_locale, text_locale
from tests.conftest import make_settings, new_id


@pytest.mark.parametrize(
    ("text", "locale"),
    [
        ("我的预算是多少？", "zh"),
        ("用 Python 调 API 怎么写？", "zh"),  # Latin words inside a Chinese question
        ("What is my budget?", "en"),
        ("Is 北京 cold in March?", "en"),  # a Chinese name inside an English question
        ("1234 ?", "en"),
    ],
)
def test_text_locale(text: str, locale: str) -> None:
    assert text_locale(text) == locale
    assert resolve_locale("auto", text) == locale
    assert resolve_locale("zh", text) == "zh"
    assert resolve_locale("en", text) == "en"


async def test_context_labels_follow_the_question_by_default(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    assert settings.locale == "auto"
    async with await AsyncMemory.open(settings) as mem:
        u, s = new_id("u"), new_id("s")
        await mem.remember(u, s, "user", "My budget is 5000 yuan / 我的预算是5000元")
        zh = await mem.context(u, s, "我的预算是多少？")
        en = await mem.context(u, s, "What is my budget?")
        forced = await mem.context(u, s, "What is my budget?", locale="zh")
    assert "## 最近对话" in zh.text and "## Recent" not in zh.text
    assert "## Recent dialogue" in en.text and "## 最近对话" not in en.text
    assert "## 最近对话" in forced.text


@pytest.mark.parametrize("fixed", ["zh", "en"])
async def test_a_fixed_locale_setting_still_forces_one(tmp_path: Path, fixed: str) -> None:
    async with await AsyncMemory.open(make_settings(tmp_path, locale=fixed)) as mem:
        u, s = new_id("u"), new_id("s")
        await mem.remember(u, s, "user", "hello")
        for query in ("我的预算是多少？", "What is my budget?"):
            text = (await mem.context(u, s, query)).text
            assert ("## 最近对话" in text) == (fixed == "zh")


def test_an_unknown_locale_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MEMSTACK_LOCALE"):
        make_settings(tmp_path, locale="fr")


async def test_an_unknown_locale_per_call_is_refused(tmp_path: Path) -> None:
    async with await AsyncMemory.open(make_settings(tmp_path)) as mem:
        with pytest.raises(ValidationError, match="locale"):
            await mem.context(new_id("u"), new_id("s"), "hi", locale="fr")
