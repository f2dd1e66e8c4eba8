"""The rule extractor's calibrated confidence: the shipped model, and what it is applied to.

The model's quality (reliability, threshold curve) is measured by
``scripts/train_fact_confidence.py`` and reported in docs/facts.md; these tests pin what
must hold whatever the weights: the model in the package is the one the extractor uses,
it only weighs features the extractor computes, and withdrawals keep their confidence.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from memstack.eval.fact_cases import load_cases
from memstack.ingest.extraction.rules import RulesExtractor
from memstack.ingest.extraction.rules.confidence import (
    MAX_READ,
    Model,
    calibrated,
    features,
    message_signals,
    shipped_model,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_model_weighs_only_features_the_extractor_computes() -> None:
    data = json.loads(files("memstack").joinpath("data", "fact_confidence.json").read_text())
    assert all((ROOT / f).is_file() for f in data["trained_on"])
    rules = RulesExtractor(calibrate=False)
    seen: set[str] = set()
    for path in sorted((ROOT / "eval-data" / "facts").glob("calibration*.jsonl")):
        for case in load_cases(path):
            for turn in case.messages:
                facts = rules.extract_sync(turn.text) if turn.role == "user" else []
                msg = message_signals(turn.text)
                for f in facts:
                    seen |= set(features(f, msg, {}, len(facts)))
    assert set(data["weights"]) <= seen, set(data["weights"]) - seen


def test_the_extractor_reports_the_models_probability() -> None:
    model = shipped_model()
    assert model is not None
    text = "I'm a welder in Jos and I'm allergic to latex"
    raw = RulesExtractor(calibrate=False).extract_sync(text)
    out = RulesExtractor().extract_sync(text)
    assert {f.key for f in out} == {f.key for f in raw} >= {"occupation", "allergies"}
    msg = message_signals(text)
    for f, r in zip(out, raw, strict=True):
        p = model.probability(features(r, msg, {}, len(raw)))
        assert f.confidence == min(round(p, 2), MAX_READ) and 0.0 < f.confidence < 1.0


def test_a_withdrawal_keeps_its_confidence() -> None:
    text = "I don't live in Leeds anymore"
    raw = RulesExtractor(calibrate=False).extract_sync(text, known={"city": "Leeds"})
    assert [f.retracts for f in raw] == [True]
    certain_no = Model(weights={}, bias=-30.0)
    assert calibrated(raw, text, {"city": "Leeds"}, certain_no) == raw
    stated = RulesExtractor(calibrate=False).extract_sync("I live in Leeds")
    assert calibrated(stated, "I live in Leeds", {}, certain_no)[0].confidence == 0.0
    certain_yes = Model(weights={}, bias=30.0)
    assert calibrated(stated, "I live in Leeds", {}, certain_yes)[0].confidence == MAX_READ
