"""benchmarks/recall_ablation.py on a made-up conversation: its figures must mean what
``memstack eval`` means (the same stored ids, the same pricing)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.test_evaluation import tiny_locomo

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recall_ablation.py"


@pytest.fixture(scope="module")
def ablation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recall_ablation", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recall_ablation"] = module
    spec.loader.exec_module(module)
    return module


def test_every_step_finds_the_planted_evidence(ablation: ModuleType, tmp_path: Path) -> None:
    convs = asyncio.run(ablation.prepare(tiny_locomo(tmp_path / "l.json.gz")))
    for name, score in ablation.plan():
        if name in ("dense turns", "bm25"):
            continue
        r = ablation.evaluate(convs, score, 200, "enforced")
        # Four of five questions ask about a topic only one turn holds; 200 tokens hold
        # several turns, so every fused ranking must keep those four.
        assert r["micro"] >= 0.8, name
        assert set(r["by_group"]) == {"conv-x"}


def test_a_tight_budget_keeps_fewer_turns(ablation: ModuleType, tmp_path: Path) -> None:
    convs = asyncio.run(ablation.prepare(tiny_locomo(tmp_path / "l.json.gz")))
    [cv] = convs
    q = cv["questions"][0]
    scores = ablation.scorer(ablation.PIPELINE)(cv, 0)
    tight = ablation._kept(cv, q, scores, 30, "enforced")
    assert set(q.evidence) <= tight  # the best turn goes first
    assert len(tight) < len(ablation._kept(cv, q, scores, 1000, "enforced")) == len(scores)
