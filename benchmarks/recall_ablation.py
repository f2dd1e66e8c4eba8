"""Offline ablation of recall scoring on LoCoMo dev: what each step of the read path is worth.

``memstack eval`` measures the real pipeline; this re-ranks the same conversations in
memory (the default embedder's vectors of exchange units, BM25 over turns with
memstack's own terms), so a scoring idea costs seconds instead of a full ingest. Each
step adds to the one before; items are single turns packed best-first into the budget.
Messages are named by their speaker as ``memstack eval`` names them: chunk texts and
rendered lines read "Tim: …" and the lexical terms include the name. The pool per channel is what
``context()`` sizes for the budget (budget / 20 tokens).

``--accounting enforced`` counts what ``context()`` enforces (``count_tokens`` of the
rendered history line, age and role label included); ``--accounting words`` counts
whitespace words of the raw turns, the accounting behind the design notes' baselines.

Run: ``python benchmarks/recall_ablation.py --data ../shared/eval-data/locomo_dev5.json.gz``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from memstack.core.settings import Settings
from memstack.eval import recall as evaluation
from memstack.ml.embedders import build_embedder
from memstack.recall import POOL_TOKENS
from memstack.recall.assembly import EN, age_header, render_turn
from memstack.recall.lexical import rewrite_query
from memstack.recall.ranking import (
    OTHER_AUTHOR,
    PERIOD_MATCH,
    PERIOD_SLACK_S,
    dense_rewrite,
    recency,
)
from memstack.recall.word_neighbours import expand, table
from memstack.stores.sql.lexical import bm25
from memstack.text.chunking import exchange_units, split_semantic
from memstack.text.periods import named_period
from memstack.text.terms import lexical_terms
from memstack.text.token_counts import line_tokens

POOL = 50  # set from --budget as context() sizes it
DEFAULTS = Settings()


async def prepare(data: Path) -> list[dict[str, Any]]:
    emb = build_embedder(DEFAULTS)
    out = []
    for conv in evaluation.locomo(data, "abl"):
        turns = [(f"{s.session_id}:{m.msg_id}", m.role, m.content, m.created_at.timestamp(), m.name)
                 for s in conv.sessions for m in s.messages]  # fmt: skip
        units = []
        for s in conv.sessions:
            # Units keyed by the dataset's ids, as the turns above are.
            keyed = [replace(m, msg_id=f"{s.session_id}:{m.msg_id}") for m in s.messages]
            for u in exchange_units(keyed):
                for piece in split_semantic(u.text):
                    units.append((u.msg_ids, piece))
        questions = list(conv.questions)
        q_text = [q.text for q in questions]
        # context()'s second dense query; a question without one (no name in it) gets
        # its own text here and no second channel in step().
        rewrites = [dense_rewrite(q, rewrite_query(q)) for q in q_text]
        q_var = [r or q for r, q in zip(rewrites, q_text, strict=True)]
        said = [f"{t[4]}: {t[2]}" for t in turns]
        vecs = await emb.embed([u[1] for u in units] + said + q_text + q_var)
        v = np.asarray(vecs, dtype=np.float32)
        a, b, c = len(units), len(units) + len(turns), len(units) + len(turns) + len(q_text)
        terms = [Counter(lexical_terms(f"{t[4]} {t[2]}")) for t in turns]
        out.append(
            {
                "turns": turns,
                "index": {t[0]: i for i, t in enumerate(turns)},
                "units": units,
                "unit_vec": v[:a],
                "turn_vec": v[a:b],
                "q_vec": v[b:c],
                "q_var": v[c:],
                "has_var": [r is not None for r in rewrites],
                "questions": questions,
                "terms": terms,
                "lengths": [sum(t.values()) for t in terms],
                "now": questions[0].now.timestamp() if questions else 0.0,
            }
        )
    return out


def ranks_of(scores: dict[str, float]) -> dict[str, int]:
    return {m: r for r, m in enumerate(sorted(scores, key=lambda m: -scores[m]), 1)}


def dense(cv: dict[str, Any], qv: np.ndarray) -> dict[str, float]:
    sims = cv["unit_vec"] @ qv
    out: dict[str, float] = {}
    for i in np.argsort(-sims)[:POOL]:
        for m in cv["units"][i][0]:
            out.setdefault(m, float(sims[i]))
    return out


def lexical(cv: dict[str, Any], question: str, neighbours: bool = False) -> dict[str, float]:
    rewrite = rewrite_query(question)
    w = expand(rewrite, table()).weights if neighbours else rewrite.weights
    df: Counter[str] = Counter()
    for tf in cv["terms"]:
        df.update(t for t in w if t in tf)
    n = len(cv["terms"])
    s = bm25(w, cv["terms"], n_docs=n, avgdl=sum(cv["lengths"]) / n, df=df, lengths=cv["lengths"])
    order = np.argsort(-np.asarray(s), kind="stable")[:POOL]
    return {cv["turns"][i][0]: s[i] for i in order if s[i] > 0}


def rrf(channels: list[tuple[dict[str, float], float]], k: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for scores, w in channels:
        for m, r in ranks_of(scores).items():
            out[m] = out.get(m, 0.0) + w / (k + r)
    return out


Scorer = Callable[[dict[str, Any], int], dict[str, float]]


def step(
    k: int,
    wl: float,
    answer: float,
    rewrite: bool,
    short: bool,
    author: bool = False,
    blend: str | None = None,
    period: bool = False,
    neighbours: bool = False,
) -> Scorer:
    def score(cv: dict[str, Any], qi: int) -> dict[str, float]:
        q = cv["questions"][qi]
        when = named_period(q.text, q.now) if period else None
        chans = [(dense(cv, cv["q_vec"][qi]), 1.0), (lexical(cv, q.text, neighbours), wl)]
        if rewrite and cv["has_var"][qi]:
            chans.append((dense(cv, cv["q_var"][qi]), 1.0))
        s = rrf(chans, k)
        if short:
            s = {m: v * min(1.0, cv["lengths"][cv["index"][m]] / 6) for m, v in s.items()}
        turns = cv["turns"]
        if answer:
            base = dict(s)
            for m in base:
                i = cv["index"][m]
                prev = turns[i - 1][0] if i > 0 else None
                if prev and prev.rsplit(":", 2)[0] == m.rsplit(":", 2)[0] and prev in base:
                    s[m] += answer * base[prev]
        if author:
            named = {t[4] for t in turns if re.search(rf"\b{t[4]}\b", q.text)}
            if named:
                s = {m: v * (1 if turns[cv["index"][m]][4] in named else OTHER_AUTHOR)
                     for m, v in s.items()}  # fmt: skip
        if when is not None:
            s = {m: v * (PERIOD_MATCH if when.contains(turns[cv["index"][m]][3], PERIOD_SLACK_S)
                         else 1.0) for m, v in s.items()}  # fmt: skip
        if blend:
            top = max(s.values(), default=1.0) or 1.0
            w_rel, w_rec = DEFAULTS.weight_relevance, DEFAULTS.weight_recency
            if when is not None:
                w_rel, w_rec = 1.0, 0.0
            half_life = DEFAULTS.recency_half_life_days
            for m, v in s.items():
                rec = recency(q.now.timestamp() - turns[cv["index"][m]][3], half_life)
                rel = v / top
                s[m] = w_rel * rel + w_rec * rec if blend == "add" else rel * (w_rel + w_rec * rec)
        return s

    return score


def dense_turns(cv: dict[str, Any], qi: int) -> dict[str, float]:
    sims = cv["turn_vec"] @ cv["q_vec"][qi]
    return {cv["turns"][i][0]: float(sims[i]) for i in np.argsort(-sims)[:POOL]}


def evaluate(convs: list[dict[str, Any]], scorer: Scorer, budget: int, accounting: str) -> float:
    hit = total = 0
    for cv in convs:
        for qi, q in enumerate(cv["questions"]):
            s = scorer(cv, qi)
            kept: set[str] = set()
            headers: set[str] = set()
            used = 0
            for m in sorted(s, key=lambda m: -s[m]):
                t = cv["turns"][cv["index"][m]]
                if accounting == "words":
                    cost, header = len(t[2].split()), ""
                else:
                    # As context() prices it: the line indented under a shared age header.
                    header = age_header(q.now.timestamp() - t[3], EN)
                    cost = line_tokens("  " + render_turn(t[1], t[2], EN, t[4]))
                    cost += 0 if header in headers else line_tokens(header)
                if used + cost <= budget:
                    used += cost
                    kept.add(m)
                    headers.add(header)
            hit += sum(1 for e in q.evidence if e in kept)
            total += len(q.evidence)
    return hit / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--accounting", choices=["enforced", "words"], default="enforced")
    args = parser.parse_args()
    global POOL
    POOL = max(20, args.budget // POOL_TOKENS)
    convs = asyncio.run(prepare(args.data))
    steps: list[tuple[str, Scorer]] = [
        ("dense turns", dense_turns),
        ("dense units", lambda cv, qi: dense(cv, cv["q_vec"][qi])),
        ("bm25", lambda cv, qi: lexical(cv, cv["questions"][qi].text)),
        ("rrf k=60", step(60, 1.0, 0.0, False, False)),
        ("rrf k=5, bm25 x1.5", step(5, 1.5, 0.0, False, False)),
        ("+ answer propagation 0.5", step(5, 1.5, 0.5, False, False)),
        ("+ dense query without names", step(5, 1.5, 0.5, True, False)),
        ("+ short-message discount", step(5, 1.5, 0.5, True, True)),
        ("+ named author x0.3", step(5, 1.5, 0.5, True, True, author=True)),
        ("+ recency added (seed's sum)", step(5, 1.5, 0.5, True, True, True, "add")),
        ("+ recency multiplied (default)", step(5, 1.5, 0.5, True, True, True, "multiply")),
        ("+ named period x3", step(5, 1.5, 0.5, True, True, True, "multiply", period=True)),
        ("+ word neighbours", step(5, 1.5, 0.5, True, True, True, "multiply", True, True)),
    ]
    results = {}
    for name, scorer in steps:
        results[name] = round(evaluate(convs, scorer, args.budget, args.accounting), 4)
        print(f"{name:32s} {results[name]:.4f}")
    print(json.dumps({"accounting": args.accounting, "budget": args.budget, **results}))


if __name__ == "__main__":
    main()
