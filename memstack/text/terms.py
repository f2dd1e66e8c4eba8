"""Text to the lexical index's terms, in Chinese and English alike.

Chinese words are not separated by spaces: its terms come from jieba's search-mode
segmentation; Latin words are stemmed.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Any

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
_LATIN_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")

# Words that carry no topic in either language; they only inflate lexical scores.
STOPWORDS = frozenset(
    """a an the and or but if then so of to in on at by for with from as is are was were be been
    being am do does did have has had i me my mine we us our you your he him his she her it its
    they them their this that these those there here what which who whom whose when where why how
    not no yes can could will would shall should may might must just also very too about into
    over under up down out than s t don didn doesn isn wasn aren weren won ll ve re d m o
    的 了 是 我 你 他 她 它 们 我们 你们 他们 在 和 与 就 都 而 及 着 或
    一个 没有 这 那 吗 呢 吧 啊 哦 嗯 也 很 还 又
    把 被 让 给 对 从 到 为 以 之 其 所 但
    如果 因为 所以 可以 什么 怎么""".split()
)

_jieba_lock = threading.Lock()
_jieba: Any = None


def _segmenter() -> Any:
    """jieba, initialised once (it builds its dictionary on first use, ~0.5 s)."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import logging

                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # A light English stemmer: enough to match "dogs"/"dog", "painting"/"painted".
    for suffix in ("ing", "edly", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def lexical_terms(text: str) -> list[str]:
    """Index/query terms: lowercased, stemmed Latin words and jieba words, no stopwords."""
    if has_cjk(text):
        pieces = [p.strip().lower() for p in _segmenter().cut_for_search(text)]
    else:
        pieces = [w.lower() for w in _LATIN_WORD.findall(text)]
    out: list[str] = []
    for p in pieces:
        if not p or p in STOPWORDS:
            continue
        if p.isascii():
            for w in _LATIN_WORD.findall(p):
                base = w.replace("’", "'").split("'")[0]
                if base not in STOPWORDS:
                    out.append(_stem(base))
        elif any(ch.isalnum() for ch in p):
            out.append(p)
    return out


@lru_cache(maxsize=16384)
def term_count(text: str) -> int:
    """``len(lexical_terms(text))``, remembered: the read path asks it of the same short
    messages call after call."""
    return len(lexical_terms(text))
