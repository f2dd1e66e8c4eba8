"""Rebuild memstack/data/word_neighbours.json from the installed all-MiniLM-L6-v2.

Run: ``.venv/bin/python scripts/build_word_neighbours.py`` (about 25 s on two cores).
The same model and vocabulary give the same file; see memstack/recall/word_neighbours.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from memstack.ml.embedders import MINILM_VERSION, MiniLMEmbedder, minilm_model_dir
from memstack.recall.word_neighbours import MIN_SCORE, TABLE, TOP, neighbour_table, vocabulary


def main() -> None:
    words = vocabulary(minilm_model_dir() / "vocab.txt")
    vectors = asyncio.run(MiniLMEmbedder().embed(words))
    neighbours = neighbour_table(words, vectors)
    body = {
        "model": MINILM_VERSION,
        "min_score": MIN_SCORE,
        "top": TOP,
        "words": len(words),
        "neighbours": neighbours,
    }
    path = Path(__file__).resolve().parents[1] / "memstack" / "data" / TABLE
    path.write_text(json.dumps(body, ensure_ascii=False, sort_keys=True) + "\n", "utf-8")
    print(f"{path}: {len(neighbours)} of {len(words)} words have neighbours")


if __name__ == "__main__":
    main()
