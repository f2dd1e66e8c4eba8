"""Re-derive the knowledge cache's score cut-offs for another embedder.

A cut-off is a cosine of one model: the specification's cache gate of 0.70 and the
knowledge base's floor of 0.5 were set with all-MiniLM-L6-v2. What a cut means is the
share of unrelated (question, stored text) pairs it lets through, and of (question, evidence)
pairs; this prints, for each MiniLM cut, the cosine of ``--embedder`` that passes the
same share of each.

Unrelated pairs: every question of a conversation against turns of the other
conversations; evidence pairs: each question against its evidence turns. Questions are
embedded as queries and turns as stored texts, as recall embeds them.

    .venv/bin/python scripts/derive_score_cuts.py --embedder e5-small \
        --data ../shared/eval-data/locomo_dev5.json.gz
"""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from memstack import load_settings
from memstack.core.ids import scoped_msg_id
from memstack.eval.datasets import Conversation, locomo
from memstack.ml.embedders import build_embedder

BASE_CUTS = {"kc_threshold": 0.70, "kb_min_score": 0.5}
TURNS_PER_CONVERSATION = 150


def _sample(convs: list[Conversation], seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    turns = [[m.content for s in c.sessions for m in s.messages] for c in convs]
    return [rng.sample(group, min(TURNS_PER_CONVERSATION, len(group))) for group in turns]


def _evidence(convs: list[Conversation]) -> tuple[list[str], list[str]]:
    text = {
        scoped_msg_id(c.user_id, s.session_id, m.msg_id): m.content
        for c in convs
        for s in c.sessions
        for m in s.messages
    }
    pairs = [(q.text, text[ref]) for c in convs for q in c.questions for ref in q.evidence]
    return [q for q, _ in pairs], [t for _, t in pairs]


Floats = NDArray[np.float32]


async def _cosines(name: str, convs: list[Conversation], seed: int) -> tuple[Floats, Floats]:
    embedder = build_embedder(load_settings(embedder=name))
    questions = [q.text for c in convs for q in c.questions]
    owner = np.asarray([i for i, c in enumerate(convs) for _ in c.questions])
    q = np.asarray(await embedder.embed_queries(questions), dtype=np.float32)
    sample = _sample(convs, seed)
    t = np.asarray(await embedder.embed([x for g in sample for x in g]), dtype=np.float32)
    group = np.repeat(np.arange(len(convs)), [len(g) for g in sample])
    unrelated = (q @ t.T)[owner[:, None] != group[None, :]]
    evidence_q, evidence_t = _evidence(convs)
    eq = np.asarray(await embedder.embed_queries(evidence_q), dtype=np.float32)
    et = np.asarray(await embedder.embed(evidence_t), dtype=np.float32)
    return unrelated, np.einsum("ij,ij->i", eq, et)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", required=True)
    parser.add_argument("--data", type=Path, action="append", required=True)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    convs = [c for path in args.data for c in locomo(path, "cuts")]
    base_unrelated, base_evidence = await _cosines("minilm", convs, args.seed)
    unrelated, evidence = await _cosines(args.embedder, convs, args.seed)
    print(f"{len(unrelated)} unrelated pairs, {len(evidence)} evidence pairs")
    for name, cut in BASE_CUTS.items():
        passed = float(np.mean(base_unrelated >= cut))
        kept = float(np.mean(base_evidence >= cut))
        by_noise = float(np.quantile(unrelated, 1.0 - passed))
        by_evidence = float(np.quantile(evidence, 1.0 - kept))
        print(
            f"{name}: minilm {cut:.2f} passes {passed:.4%} of unrelated pairs and "
            f"{kept:.2%} of evidence pairs; {args.embedder}: {by_noise:.3f} passes as much "
            f"noise (and {np.mean(evidence >= by_noise):.2%} of evidence), {by_evidence:.3f} "
            f"as much evidence (and {np.mean(unrelated >= by_evidence):.4%} of noise)"
        )


if __name__ == "__main__":
    asyncio.run(main())
