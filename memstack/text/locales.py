"""Which language a text is written in, as far as the labels of an assembled context and
a summary's punctuation need to know: Chinese or English."""

from __future__ import annotations

import re

_CJK = re.compile(r"[\u4e00-\u9fff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")


def text_locale(text: str) -> str:
    """``"zh"`` when Chinese characters carry the text, else ``"en"``: a Chinese question
    that names ``Python`` or ``API`` is still Chinese (characters are counted against
    Latin words, not letters)."""
    cjk = len(_CJK.findall(text))
    latin = len(_LATIN_WORD.findall(text))
    return "zh" if cjk and cjk >= latin else "en"


def resolve_locale(locale: str, text: str) -> str:
    """``locale`` itself, or for ``"auto"`` the language of ``text``."""
    return text_locale(text) if locale == "auto" else locale
