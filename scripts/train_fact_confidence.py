"""Fit the rule extractor's confidence model on labelled conversations.

    .venv/bin/python scripts/train_fact_confidence.py \\
        --train eval-data/facts/calibration*.jsonl \\
        [--check eval-data/facts/adversarial_holdout.*.jsonl] [--plot docs/img/x.png] [--curve]

Each case is read as ingest reads it (only the user's own turns, known facts carried
from message to message), with the rules' own priors. A fact of the user's last message
that sets a scored key's final value is a sample: right when it matches the case's
expected value, wrong when the key must be absent or the value differs; keys a case does
not score are left out. A
logistic model (L2, its strength chosen by cross-validation over whole cases) learns
P(right) from :func:`memstack.ingest.extraction.rules.confidence.features`; the weights
go to ``memstack/data/fact_confidence.json``. The report gives the cross-validated
reliability per confidence bin on the training cases and, with ``--check``, on files the
model never saw; ``--plot`` draws both as a reliability diagram. ``--curve`` adds what
each ``fact_min_confidence`` would serve, end to end and cross-validated: each fold's
model scores its held-out cases message by message, a fact below the threshold is a
candidate (which, as in the store, puts in doubt a current value it would replace).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memstack.core.facts.vocabulary import same_value
from memstack.core.identity import UserIdentity
from memstack.eval.fact_cases import Case, load_cases, value_match
from memstack.eval.facts import score, summary
from memstack.ingest.extraction.rules import RulesExtractor
from memstack.ingest.extraction.rules.confidence import (
    Model,
    calibrated,
    features,
    message_signals,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "memstack" / "data" / "fact_confidence.json"
L2_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)
BINS = 10
MIN_PLOTTED = 8
THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass
class Sample:
    case: str
    x: dict[str, float]
    right: bool


def samples(cases: Sequence[Case]) -> list[Sample]:
    """One sample per scored key whose final value the user's last message set.

    The labels say what holds at the end of a case. A value set earlier and later
    changed in words the rules miss would count against a statement that was right
    when it was made, and teach the model that short, early statements are unreliable.
    """
    rules = RulesExtractor(calibrate=False)
    out: list[Sample] = []
    for case in cases:
        speaker = UserIdentity("u", case.identity[0] if case.identity else None, case.identity[1:])
        own = [t for t in case.messages if speaker.speaks(t.role, t.name)]
        known: dict[str, Any] = {}
        setter: dict[str, dict[str, float]] = {}
        for turn in own:
            if turn is own[-1]:
                setter = {}  # only what the last message states is scored
            facts = rules.extract_sync(turn.text, known=dict(known))
            msg = message_signals(turn.text)
            for f in facts:
                if f.retracts:
                    known.pop(f.key, None)
                    setter.pop(f.key, None)
                    continue
                setter[f.key] = features(f, msg, known, len(facts))
                known[f.key] = f.value
        for key, x in setter.items():
            if key in case.absent:
                out.append(Sample(case.id, x, False))
            elif key in case.expected:
                out.append(Sample(case.id, x, value_match(key, case.expected[key], known[key])))
    return out


def _matrix(data: Sequence[Sample], names: Sequence[str]) -> tuple[Any, Any]:
    x = np.array([[s.x.get(n, 0.0) for n in names] for s in data], dtype=float)
    y = np.array([1.0 if s.right else 0.0 for s in data])
    return x, y


def fit(x: Any, y: Any, l2: float, iterations: int = 50) -> tuple[Any, float]:
    """Logistic regression by Newton's method; the bias is not penalised."""
    n, d = x.shape
    xb = np.hstack([np.ones((n, 1)), x])
    w = np.zeros(d + 1)
    penalty = np.eye(d + 1) * l2
    penalty[0, 0] = 0.0
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-np.clip(xb @ w, -30, 30)))
        grad = xb.T @ (p - y) + penalty @ w
        hess = xb.T @ (xb * (p * (1 - p))[:, None]) + penalty + np.eye(d + 1) * 1e-9
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[1:], float(w[0])


def predict(x: Any, w: Any, b: float) -> Any:
    return 1 / (1 + np.exp(-np.clip(x @ w + b, -30, 30)))


def cross_validated(data: Sequence[Sample], names: Sequence[str], l2: float, k: int) -> Any:
    """Out-of-fold probabilities, folds made of whole cases."""
    fold = _folds({s.case for s in data}, k)
    x, y = _matrix(data, names)
    out = np.zeros(len(data))
    for f in range(k):
        test = np.array([fold[s.case] == f for s in data])
        w, b = fit(x[~test], y[~test], l2)
        out[test] = predict(x[test], w, b)
    return out


def _folds(ids: set[str], k: int) -> dict[str, int]:
    order = sorted(ids)
    random.Random(7).shuffle(order)
    return {cid: i % k for i, cid in enumerate(order)}


def _served(case: Case, model: Model, threshold: float) -> dict[str, Any]:
    """The case's facts as ingest would serve them at ``threshold``."""
    rules = RulesExtractor(calibrate=False)
    speaker = UserIdentity("u", case.identity[0] if case.identity else None, case.identity[1:])
    known: dict[str, Any] = {}
    for turn in case.messages:
        if not speaker.speaks(turn.role, turn.name):
            continue
        raw = rules.extract_sync(turn.text, known=dict(known))
        for f in calibrated(raw, turn.text, known, model):
            if f.retracts:
                known.pop(f.key, None)
            elif f.confidence >= threshold:
                known[f.key] = f.value
            elif f.key in known and not _adds_only(known[f.key], f.value):
                known.pop(f.key)  # a candidate that would replace the value doubts it
    return known


def _adds_only(current: Any, new: Any) -> bool:
    if same_value(current, new):
        return True
    if isinstance(current, list) and isinstance(new, list):
        return all(any(str(c).casefold() == str(n).casefold() for n in new) for c in current)
    return False


def threshold_curve(cases: Sequence[Case], l2: float, k: int) -> None:
    """Precision, recall and F1 of the served facts per threshold, cross-validated."""
    fold = _folds({c.id for c in cases}, k)
    order: list[Case] = []
    served: dict[float, list[dict[str, Any]]] = {t: [] for t in THRESHOLDS}
    for f in range(k):
        train = samples([c for c in cases if fold[c.id] != f])
        names = sorted({n for s in train for n in s.x})
        w, b = fit(*_matrix(train, names), l2)
        model = Model(weights=dict(zip(names, map(float, w), strict=True)), bias=b)
        test = [c for c in cases if fold[c.id] == f]
        order += test
        for t in THRESHOLDS:
            served[t] += [_served(c, model, t) for c in test]
    print("\nserved facts by fact_min_confidence (cross-validated, end to end):")
    for t in THRESHOLDS:
        s = summary(score(order, served[t]))
        print(
            f"  {t:.1f}: precision {s['precision']:.3f} recall {s['recall']:.3f} F1 {s['f1']:.3f}"
        )


def log_loss(p: Any, y: Any) -> float:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def reliability(p: Any, y: Any) -> list[tuple[float, float, int]]:
    """(mean confidence, share right, count) per confidence bin with samples."""
    rows = []
    for i in range(BINS):
        lo, hi = i / BINS, (i + 1) / BINS
        m = (p >= lo) & ((p < hi) if i < BINS - 1 else (p <= hi))
        if m.any():
            rows.append((float(p[m].mean()), float(y[m].mean()), int(m.sum())))
    return rows


def report(title: str, p: Any, y: Any) -> dict[str, Any]:
    rows = reliability(p, y)
    ece = sum(n * abs(c - a) for c, a, n in rows) / max(len(y), 1)
    print(
        f"\n{title}: {len(y)} facts, {int(y.sum())} right; log-loss {log_loss(p, y):.3f}, "
        f"ECE {ece:.3f}"
    )
    print("  bin  mean-conf  share-right     n")
    for c, a, n in rows:
        print(f"       {c:9.2f}  {a:11.2f}  {n:4d}")
    for t in (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9):
        kept = p >= t
        if kept.any():
            print(
                f"  served at >= {t:.2f}: precision {y[kept].mean():.3f}, "
                f"keeps {y[kept].sum() / max(y.sum(), 1):.3f} of the right facts"
            )
    return {"rows": rows, "ece": ece}


def plot(path: Path, curves: dict[str, list[tuple[float, float, int]]]) -> None:
    """A reliability diagram (confidence against share right) as a PNG."""
    from PIL import Image, ImageDraw

    size, pad = 520, 60
    img = Image.new("RGB", (size, size), "white")
    d = ImageDraw.Draw(img)
    span = size - 2 * pad

    def at(c: float, a: float) -> tuple[float, float]:
        return pad + c * span, size - pad - a * span

    d.rectangle([pad, pad, size - pad, size - pad], outline="black")
    d.line([at(0, 0), at(1, 1)], fill=(160, 160, 160), width=1)
    for i in range(0, 11, 2):
        d.text((pad + i / 10 * span - 8, size - pad + 6), f"{i / 10:.1f}", fill="black")
        d.text((pad - 30, size - pad - i / 10 * span - 6), f"{i / 10:.1f}", fill="black")
    d.text((size / 2 - 60, size - 24), "confidence (model)", fill="black")
    d.text(
        (pad, size - pad + 20),
        f"bins of 0.1; circles sized by facts; bins under {MIN_PLOTTED} left out",
        fill=(90, 90, 90),
    )
    d.text((8, pad - 40), "share of facts right", fill="black")
    colours = [(31, 119, 180), (214, 39, 40), (44, 160, 44)]
    for (name, all_rows), colour in zip(curves.items(), colours, strict=False):
        rows = [r for r in all_rows if r[2] >= MIN_PLOTTED]  # a bin of two says nothing
        points = [at(c, a) for c, a, _ in rows]
        if len(points) > 1:
            d.line(points, fill=colour, width=2)
        for (_, _, n), (px, py) in zip(rows, points, strict=True):
            r = 2 + min(6, math.sqrt(n))
            d.ellipse([px - r, py - r, px + r, py + r], outline=colour, width=2)
        ly = pad + 10 + 16 * list(curves).index(name)
        d.line([pad + 10, ly + 6, pad + 30, ly + 6], fill=colour, width=3)
        d.text((pad + 36, ly), name, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--train", nargs="+", type=Path, required=True)
    ap.add_argument("--check", nargs="*", type=Path, default=[])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--curve", action="store_true", help="also the served-facts threshold curve")
    args = ap.parse_args(argv)

    cases = [c for f in args.train for c in load_cases(f)]
    train = samples(cases)
    names = sorted({n for s in train for n in s.x})
    y = np.array([1.0 if s.right else 0.0 for s in train])
    best = min(L2_GRID, key=lambda l2: log_loss(cross_validated(train, names, l2, args.folds), y))
    cv = cross_validated(train, names, best, args.folds)
    print(f"training facts: {len(train)} from {len({s.case for s in train})} cases; L2 {best}")
    curves = {"cross-validated (training files)": report("cross-validated", cv, y)["rows"]}
    x, _ = _matrix(train, names)
    w, b = fit(x, y, best)
    if args.check:
        held = samples([c for f in args.check for c in load_cases(f)])
        hx, hy = _matrix(held, names)
        curves["held out (never trained on)"] = report("held out", predict(hx, w, b), hy)["rows"]
    model = {
        "about": "P(fact right) for the rule extractor; scripts/train_fact_confidence.py",
        "trained_on": sorted(
            str(f.relative_to(ROOT)) if f.is_absolute() else str(f) for f in args.train
        ),
        "samples": len(train),
        "l2": best,
        "bias": round(b, 6),
        "weights": {n: round(float(v), 6) for n, v in zip(names, w, strict=True) if abs(v) > 1e-9},
    }
    args.out.write_text(json.dumps(model, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    if args.plot:
        plot(args.plot, curves)
        print(f"wrote {args.plot}")
    if args.curve:
        threshold_curve(cases, best, args.folds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
