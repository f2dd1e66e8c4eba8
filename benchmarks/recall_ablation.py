"""Offline ablation of recall scoring: what each step of the read path is worth.

``memstack eval`` measures the real pipeline; this re-ranks the same conversations in
memory (the default embedder's vectors of exchange units, BM25 over turns with
memstack's own terms), so a scoring idea costs seconds instead of a full ingest.
Messages are named by their speaker as ``memstack eval`` names them: chunk texts and
rendered lines read "Tim: …" and the lexical terms include the name. The pool per
channel is what ``context()`` sizes for the budget (budget / 20 tokens).

The plan: the plain baseline (exchange units and BM25 fused by RRF, k = 10), each of
the read path's features alone on it, the read path as shipped, the read path without
each feature, and the read path with each candidate technique (index keys, neighbour
spill, session prior). ``--sweep`` runs alternatives at a few strengths instead.
Recall is reported micro, macro and per group (conversation or question type).

``--accounting enforced`` counts what ``context()`` enforces (``count_tokens`` of the
rendered history line, age header and speaker label included, long messages as their
excerpt); ``--accounting words`` counts whitespace words of the raw turns.

Run: ``python benchmarks/recall_ablation.py --data ../shared/eval-data/locomo_dev5.json.gz``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from memstack.core.ids import scoped_msg_id
from memstack.core.settings import Settings
from memstack.eval import datasets
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
from memstack.recall.snippets import excerpt
from memstack.recall.word_neighbours import expand, table
from memstack.stores.sql.lexical import bm25
from memstack.text.chunking import exchange_units, split_semantic
from memstack.text.periods import named_period
from memstack.text.terms import lexical_terms
from memstack.text.token_counts import line_tokens

POOL = 50  # set from --budget as context() sizes it
DEFAULTS = Settings()


def index_key(ids: tuple[str, ...], turns: dict[str, tuple[Any, ...]]) -> str:
    """A unit's index key: who speaks in it and on which day."""
    first = turns[ids[0]]
    names = ", ".join(dict.fromkeys(turns[i][4] or turns[i][1] for i in ids))
    day = datetime.fromtimestamp(first[3], UTC).strftime("%d %B %Y").lstrip("0")
    return f"{names}; {day}\n"


async def prepare(data: Path, dataset: str = "locomo") -> list[dict[str, Any]]:
    emb = build_embedder(DEFAULTS)
    out = []
    for conv in datasets.LOADERS[dataset](data, "abl"):
        turns = [
            (scoped_msg_id(conv.user_id, s.session_id, m.msg_id), m.role, m.content,
             m.created_at.timestamp(), m.name)
            for s in conv.sessions for m in s.messages
        ]  # fmt: skip
        turns_by_id = {t[0]: t for t in turns}
        units = []
        for s in conv.sessions:
            # Units keyed by the dataset's ids, as the turns above are.
            keyed = [
                replace(m, msg_id=scoped_msg_id(conv.user_id, s.session_id, m.msg_id))
                for m in s.messages
            ]
            for u in exchange_units(keyed):
                for piece in split_semantic(u.text):
                    units.append((u.msg_ids, piece))
        questions = list(conv.questions)
        q_text = [q.text for q in questions]
        # context()'s second dense query; a question without one (no name in it) gets
        # its own text here and no second channel in step().
        rewrites = [dense_rewrite(q) for q in q_text]
        q_var = [r or q for r, q in zip(rewrites, q_text, strict=True)]
        said = [f"{t[4] or t[1]}: {t[2]}" for t in turns]
        keyed = [index_key(ids, turns_by_id) + text for ids, text in units]
        # Questions as context() embeds them: as queries (e5 prefixes them apart).
        asked = await emb.embed_queries(q_text + q_var)
        stored = await emb.embed([u[1] for u in units] + said + keyed)
        a, b = len(units), len(units) + len(turns)
        v = np.asarray(stored[:b] + asked + stored[b:], dtype=np.float32)
        c, d = b + len(q_text), b + 2 * len(q_text)
        terms = [Counter(lexical_terms(f"{t[4] or ''} {t[2]}")) for t in turns]
        out.append(
            {
                "turns": turns,
                "index": {t[0]: i for i, t in enumerate(turns)},
                "units": units,
                "unit_vec": v[:a],
                "turn_vec": v[a:b],
                "q_vec": v[b:c],
                "q_var": v[c:d],
                "key_vec": v[d:],
                "name": conv.user_id,
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


def dense(cv: dict[str, Any], qv: np.ndarray, keyed: bool = False) -> dict[str, float]:
    sims = cv["key_vec" if keyed else "unit_vec"] @ qv
    out: dict[str, float] = {}
    for i in np.argsort(-sims)[:POOL]:
        for m in cv["units"][i][0]:
            out.setdefault(m, float(sims[i]))
    return out


def lexical(
    cv: dict[str, Any],
    question: str,
    neighbours: bool = False,
    extra: dict[str, float] | None = None,
) -> dict[str, float]:
    rewrite = rewrite_query(question)
    w = dict(expand(rewrite, table()).weights if neighbours else rewrite.weights)
    w.update({t: v for t, v in (extra or {}).items() if t not in w})
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


def zfuse(channels: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Weighted sum of each channel's z-scores over its pool (an item a channel did not
    return gets that channel's lowest), shifted to be positive."""
    out: dict[str, float] = {}
    pools = [(s, w) for s, w in channels if s]
    for m in {m for s, _ in pools for m in s}:
        total = 0.0
        for scores, w in pools:
            v = np.asarray(list(scores.values()))
            total += w * (scores.get(m, v.min()) - v.mean()) / (v.std() or 1.0)
        out[m] = total
    lo = min(out.values(), default=0.0)
    return {m: v - lo + 1e-6 for m, v in out.items()}


def feedback_terms(
    cv: dict[str, Any], top: list[str], known: set[str], n: int, w: float
) -> dict[str, float]:
    """Pseudo-relevance feedback: the ``n`` terms of the ``top`` turns with the highest
    tf·idf that the query lacks, each at weight ``w``."""
    df: Counter[str] = Counter()
    for tf in cv["terms"]:
        df.update(tf.keys())
    gain: Counter[str] = Counter()
    for m in top:
        for t, f in cv["terms"][cv["index"][m]].items():
            if t not in known:
                gain[t] += f * float(np.log(len(cv["terms"]) / df[t]))
    return {t: w for t, _ in gain.most_common(n)}


def session_decay(s: dict[str, float], decay: float) -> dict[str, float]:
    """Diversity: the n-th best turn of a session counts ``decay``**n."""
    seen: Counter[str] = Counter()
    out = {}
    for m in sorted(s, key=lambda m: -s[m]):
        out[m] = s[m] * decay ** seen[session_of(m)]
        seen[session_of(m)] += 1
    return out


Scorer = Callable[[dict[str, Any], int], dict[str, float]]


@dataclass(frozen=True)
class Config:
    """The read path's scoring steps; the defaults are the plain baseline."""

    k: int = 10
    w_lex: float = 1.0
    answer: float = 0.0
    rewrite: bool = False
    short: bool = False
    author: bool = False
    blend: str | None = None
    period: bool = False
    neighbours: bool = False
    keys: bool = False
    spill: float = 0.0
    prior: float = 0.0
    # Tried beyond the three: z-score fusion (BM25 weight w_lex), feedback terms
    # at this weight, a dense channel of single turns, per-session diversity.
    zscore: bool = False
    prf: float = 0.0
    turn_channel: bool = False
    decay: float = 1.0


def session_of(m: str) -> str:
    return m.rsplit(":", 2)[0]


def spill(cv: dict[str, Any], s: dict[str, float], share: float) -> dict[str, float]:
    """A turn beside a high-scoring turn of its session gets ``share`` of that score
    (scores min-max scaled first); only turns already in the pool."""
    lo, hi = min(s.values()), max(s.values())
    scaled = {m: (v - lo) / (hi - lo or 1.0) for m, v in s.items()}
    turns, out = cv["turns"], dict(scaled)
    for m, v in scaled.items():
        i = cv["index"][m]
        for j in (i - 1, i + 1):
            if 0 <= j < len(turns) and session_of(turns[j][0]) == session_of(m):
                n = turns[j][0]
                if n in out:
                    out[n] = max(out[n], scaled[n] + share * v)
    return out


def session_prior(
    cv: dict[str, Any], s: dict[str, float], qv: np.ndarray, lam: float
) -> dict[str, float]:
    """Each turn gets ``lam`` × its session's best dense similarity to the question."""
    lo, hi = min(s.values()), max(s.values())
    sims = cv["unit_vec"] @ qv
    best: dict[str, float] = {}
    for (ids, _), sim in zip(cv["units"], sims, strict=True):
        sess = session_of(ids[0])
        best[sess] = max(best.get(sess, -1.0), float(sim))
    return {m: (v - lo) / (hi - lo or 1.0) + lam * best[session_of(m)] for m, v in s.items()}


def _post(cv: dict[str, Any], qi: int, s: dict[str, float], c: Config) -> dict[str, float]:
    """Everything after the fusion of ranks, in context()'s order."""
    q, turns = cv["questions"][qi], cv["turns"]
    if c.short:
        s = {m: v * min(1.0, cv["lengths"][cv["index"][m]] / 6) for m, v in s.items()}
    if c.answer:
        base = dict(s)
        for m in base:
            i = cv["index"][m]
            prev = turns[i - 1][0] if i > 0 else None
            if prev and session_of(prev) == session_of(m) and prev in base:
                s[m] += c.answer * base[prev]
    if c.spill and s:
        s = spill(cv, s, c.spill)
    if c.prior and s:
        s = session_prior(cv, s, cv["q_vec"][qi], c.prior)
    if c.author:
        named = {t[4] for t in turns if t[4] and re.search(rf"\b{t[4]}\b", q.text)}
        if named:
            s = {m: v * (1 if turns[cv["index"][m]][4] in named else OTHER_AUTHOR)
                 for m, v in s.items()}  # fmt: skip
    when = named_period(q.text, q.now) if c.period else None
    if when is not None:
        s = {m: v * (PERIOD_MATCH if when.contains(turns[cv["index"][m]][3], PERIOD_SLACK_S)
                     else 1.0) for m, v in s.items()}  # fmt: skip
    if c.blend:
        s = _recency(cv, q, s, c.blend, when is not None)
    return s


def _recency(
    cv: dict[str, Any], q: Any, s: dict[str, float], blend: str, dated: bool
) -> dict[str, float]:
    top = max(s.values(), default=1.0) or 1.0
    w_rel, w_rec = (1.0, 0.0) if dated else (DEFAULTS.weight_relevance, DEFAULTS.weight_recency)
    out = {}
    for m, v in s.items():
        rec = recency(
            q.now.timestamp() - cv["turns"][cv["index"][m]][3], DEFAULTS.recency_half_life_days
        )
        rel = v / top
        out[m] = w_rel * rel + w_rec * rec if blend == "add" else rel * (w_rel + w_rec * rec)
    return out


def scorer(c: Config) -> Scorer:
    def fused(cv: dict[str, Any], qi: int, extra: dict[str, float] | None) -> dict[str, float]:
        q = cv["questions"][qi]
        chans = [
            (dense(cv, cv["q_vec"][qi], c.keys), 1.0),
            (lexical(cv, q.text, c.neighbours, extra), c.w_lex),
        ]
        if c.rewrite and cv["has_var"][qi]:
            chans.append((dense(cv, cv["q_var"][qi], c.keys), 1.0))
        if c.turn_channel:
            chans.append((dense_turns(cv, qi), 1.0))
        return zfuse(chans) if c.zscore else rrf(chans, c.k)

    def score(cv: dict[str, Any], qi: int) -> dict[str, float]:
        s = _post(cv, qi, fused(cv, qi, None), c)
        if c.prf:
            top = sorted(s, key=lambda m: -s[m])[:5]
            known = set(rewrite_query(cv["questions"][qi].text).weights)
            s = _post(cv, qi, fused(cv, qi, feedback_terms(cv, top, known, 5, c.prf)), c)
        return session_decay(s, c.decay) if c.decay < 1.0 else s

    return score


def dense_turns(cv: dict[str, Any], qi: int) -> dict[str, float]:
    sims = cv["turn_vec"] @ cv["q_vec"][qi]
    return {cv["turns"][i][0]: float(sims[i]) for i in np.argsort(-sims)[:POOL]}


def _kept(
    cv: dict[str, Any], q: Any, s: dict[str, float], budget: int, accounting: str
) -> set[str]:
    weights = rewrite_query(q.text).weights
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
            # A long message prints as its excerpt (context()'s split_chars).
            text = excerpt(t[2], weights, DEFAULTS.chunk_split_chars)
            cost = line_tokens("  " + render_turn(t[1], text, EN, t[4]))
            cost += 0 if header in headers else line_tokens(header)
        if used + cost <= budget:
            used += cost
            kept.add(m)
            headers.add(header)
    return kept


def evaluate(
    convs: list[dict[str, Any]], score: Scorer, budget: int, accounting: str
) -> dict[str, Any]:
    """Micro and macro recall, and micro recall per group (conversation, question type)."""
    per: dict[str, list[int]] = {}
    shares = []
    for cv in convs:
        for qi, q in enumerate(cv["questions"]):
            hit_total = per.setdefault(q.group, [0, 0])
            kept = _kept(cv, q, score(cv, qi), budget, accounting)
            hit = sum(1 for e in q.evidence if e in kept)
            hit_total[0] += hit
            hit_total[1] += len(q.evidence)
            shares.append(hit / len(q.evidence))
    hits, total = sum(h for h, _ in per.values()), sum(n for _, n in per.values())
    return {
        "micro": round(hits / total, 4),
        "macro": round(float(np.mean(shares)), 4),
        "by_group": {g: round(h / n, 4) for g, (h, n) in sorted(per.items())},
    }


PIPELINE = Config(k=5, w_lex=1.5, answer=0.5, rewrite=True, short=True, author=True,
                  blend="multiply", period=True, neighbours=True)  # fmt: skip
FEATURES = {
    "rrf k=5, bm25 x1.5": {"k": 5, "w_lex": 1.5},
    "answer propagation 0.5": {"answer": 0.5},
    "dense query without names": {"rewrite": True},
    "short-message discount": {"short": True},
    "named author x0.3": {"author": True},
    "recency multiplied": {"blend": "multiply"},
    "named period x3": {"period": True},
    "word neighbours": {"neighbours": True},
    "index keys": {"keys": True},
    "neighbour spill 0.6": {"spill": 0.6},
    "session prior 1.0": {"prior": 1.0},
}
NEW = ("index keys", "neighbour spill 0.6", "session prior 1.0")


def plan() -> list[tuple[str, Scorer]]:
    """The baseline, each feature alone on it, the pipeline, the pipeline without each of
    its features, and the pipeline with the new ones."""
    base = Config()
    steps: list[tuple[str, Scorer]] = [
        ("dense turns", dense_turns),
        ("bm25", lambda cv, qi: lexical(cv, cv["questions"][qi].text)),
        ("plain: rrf k=10 (units + bm25)", scorer(base)),
    ]
    steps += [(f"plain + {f}", scorer(replace(base, **kw))) for f, kw in FEATURES.items()]
    steps.append(("pipeline (defaults)", scorer(PIPELINE)))
    for f, kw in FEATURES.items():
        if f in NEW:
            steps.append((f"pipeline + {f}", scorer(replace(PIPELINE, **kw))))
        else:
            off = {k: getattr(base, k) for k in kw}
            steps.append((f"pipeline - {f}", scorer(replace(PIPELINE, **off))))
    new = {k: v for f in NEW for k, v in FEATURES[f].items()}
    steps.append(("pipeline + all three", scorer(replace(PIPELINE, **new))))
    return steps


def sweep() -> list[tuple[str, Scorer]]:
    """The pipeline with each alternative at a few strengths (``--sweep``)."""
    grid: list[tuple[str, dict[str, Any]]] = [
        *((f"spill {x}", {"spill": x}) for x in (0.2, 0.4, 0.8)),
        *((f"session prior {x}", {"prior": x}) for x in (0.1, 0.2, 0.4)),
        *((f"z-score fusion, bm25 x{x}", {"zscore": True, "w_lex": x}) for x in (0.4, 1.0)),
        ("feedback terms x0.3", {"prf": 0.3}),
        ("dense channel of single turns", {"turn_channel": True}),
        *((f"session diversity {x}", {"decay": x}) for x in (0.97, 0.9)),
        *((f"rrf k={x}", {"k": x}) for x in (3, 10, 20)),
        *((f"bm25 x{x}", {"w_lex": x}) for x in (1.0, 2.0)),
    ]
    return [(f"pipeline, {name}", scorer(replace(PIPELINE, **kw))) for name, kw in grid]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--dataset", choices=sorted(datasets.LOADERS), default="locomo")
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--accounting", choices=["enforced", "words"], default="enforced")
    parser.add_argument("--only", help="run only the steps whose name contains this")
    parser.add_argument("--sweep", action="store_true", help="alternatives at a few strengths")
    parser.add_argument("--pool", type=int, help="candidates per channel (default: budget / 20)")
    args = parser.parse_args()
    global POOL
    POOL = args.pool or max(20, args.budget // POOL_TOKENS)
    convs = asyncio.run(prepare(args.data, args.dataset))
    results = {}
    for name, score in sweep() if args.sweep else plan():
        if args.only and args.only not in name:
            continue
        r = evaluate(convs, score, args.budget, args.accounting)
        results[name] = r
        conv = " ".join(f"{x:.3f}" for x in r["by_group"].values())
        print(f"{name:40s} micro {r['micro']:.4f} macro {r['macro']:.4f}  [{conv}]", flush=True)
    print(json.dumps({"accounting": args.accounting, "budget": args.budget, **results}))


if __name__ == "__main__":
    main()
