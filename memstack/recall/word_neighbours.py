"""Words that mean nearly the same, for the lexical channel: "kids" also finds "children".

BM25 only matches the words a question uses. A user who asks about their "kids" said
"children"; one who asks what they "chose" said "picked". Each English word of the
question therefore also searches for its nearest words in all-MiniLM-L6-v2's space, with
the same weight, where their cosine is at least :data:`MIN_SCORE`.

The table ships with memstack (``data/word_neighbours.json``): built once from the
whole words of MiniLM's vocabulary by ``scripts/build_word_neighbours.py``, so a query
pays a dictionary lookup, every process and every embedder expands alike, and no user's
text is in it. Chinese words are not expanded: MiniLM was trained on English.

Measured on LoCoMo dev (docs/benchmarks.md): evidence recall at 1000 tokens 0.756 →
0.769 in ``context()``; offline, 0.65 let in too many loose associates (+0.005 where 0.7
gave +0.018).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from memstack.core.errors import ModelUnavailable
from memstack.recall.lexical import QUERY_STOPWORDS, Rewrite
from memstack.text.terms import STOPWORDS, lexical_terms

MIN_SCORE = 0.7
# At most this many neighbours per word; a word rarely has more above the threshold.
TOP = 9
TABLE = "word_neighbours.json"
_WORD = re.compile(r"[a-z]{3,}")
# Words naming a day, a month, a time of day or a count sit next to their siblings
# ("sunday": monday, saturday): a question about Sunday must not search Monday. They are
# neither expanded nor added.
CALENDAR_AND_COUNTS = frozenset(
    """monday tuesday wednesday thursday friday saturday sunday weekday weekdays weekend
    weekends january february march april may june july august september october november
    december spring summer autumn fall winter today tomorrow yesterday tonight morning
    afternoon evening night noon midnight zero one two three four five six seven eight
    nine ten eleven twelve twenty thirty forty fifty hundred thousand million billion
    first second third fourth fifth last next""".split()
)


@lru_cache(maxsize=1)
def table() -> Mapping[str, tuple[str, ...]]:
    """The shipped table, read on first use (~20 ms)."""
    try:
        raw = json.loads(files("memstack").joinpath("data", TABLE).read_text("utf-8"))
        return {w: tuple(n) for w, n in raw["neighbours"].items()}
    except (OSError, ValueError, KeyError) as exc:
        raise ModelUnavailable(f"memstack's word table {TABLE} is unreadable: {exc}") from exc


def expand(rewrite: Rewrite, neighbours: Mapping[str, Sequence[str]]) -> Rewrite:
    """``rewrite`` with each English query word's neighbours added at that word's weight;
    terms the query already has keep their own weight."""
    weights = dict(rewrite.weights)
    added: list[str] = []
    for word in re.findall(r"[A-Za-z]+", rewrite.original):
        near = neighbours.get(word.lower())
        own = lexical_terms(word)
        if not near or len(own) != 1 or own[0] not in rewrite.weights:
            continue
        for other in near:
            for term in lexical_terms(other):
                if term not in weights:
                    weights[term] = rewrite.weights[own[0]]
                    added.append(term)
    if not added:
        return rewrite
    return replace(rewrite, weights=weights, expanded=tuple(added))


def vocabulary(vocab_txt: Path) -> list[str]:
    """The whole English words of a BERT vocabulary that a query could search for."""
    words = (line.strip() for line in vocab_txt.read_text("utf-8").splitlines())
    skip = STOPWORDS | QUERY_STOPWORDS | CALENDAR_AND_COUNTS
    return sorted({w for w in words if _WORD.fullmatch(w) and w not in skip})


def neighbour_table(words: Sequence[str], vectors: Any) -> dict[str, list[str]]:
    """Each word's nearest other words at cosine ≥ MIN_SCORE, best first; a neighbour
    that searches the same term (``kid``/``kids``) adds nothing and is left out."""
    import numpy as np

    unit = np.asarray(vectors, dtype=np.float32)
    out: dict[str, list[str]] = {}
    block = 2048  # a 2048 x vocabulary block of cosines is ~170 MB
    for start in range(0, len(words), block):
        sims = unit[start : start + block] @ unit.T
        top = np.argsort(-sims, axis=1)[:, : TOP + 8]
        for row, word in enumerate(words[start : start + block]):
            own = set(lexical_terms(word))
            near = [
                words[j]
                for j in top[row]
                if sims[row, j] >= MIN_SCORE and not own & set(lexical_terms(words[j]))
            ][:TOP]
            if near:
                out[word] = near
    return out
