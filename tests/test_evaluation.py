"""``memstack eval`` and ``memstack calibrate`` on small made-up data, and once on LoCoMo."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from memstack.cli import app
from memstack.core.errors import ValidationError
from memstack.core.settings import Settings
from memstack.eval import datasets
from memstack.eval import recall as evaluation
from memstack.memory import AsyncMemory
from memstack.ops import calibrate as calibration
from memstack.recall.result import ManifestItem
from memstack.stores.sql import ledger
from tests.conftest import make_settings

EVAL_DATA = Path(__file__).resolve().parents[2] / "shared" / "eval-data"

TOPICS = [
    ("pottery", "I took a pottery class and made a blue bowl."),
    ("marathon", "I ran the city marathon in four hours."),
    ("violin", "My daughter started violin lessons on Tuesday."),
    ("tomatoes", "The tomatoes in the garden finally turned red."),
]


def tiny_locomo(path: Path) -> Path:
    turns = []
    for i, (_, text) in enumerate(TOPICS):
        turns.append({"speaker": "Ann", "dia_id": f"D1:{2 * i + 1}", "text": text})
        turns.append({"speaker": "Bob", "dia_id": f"D1:{2 * i + 2}", "text": "Nice, tell me more!"})
    qa = [
        {
            "question": f"What did Ann say about {t}?",
            "answer": "x",
            "evidence": [f"D1:{2 * i + 1}"],
            "category": 4,
        }
        for i, (t, _) in enumerate(TOPICS)
    ]
    qa.append({"question": "Adversarial?", "answer": "x", "evidence": ["D1:1"], "category": 5})
    qa.append({"question": "Broken ref?", "answer": "x", "evidence": ["D1:3; D9:9"], "category": 1})
    data = [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": turns,
            },
            "qa": qa,
        }
    ]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    return path


def tiny_longmemeval(path: Path) -> Path:
    sessions = [
        [
            {"role": "user", "content": text, "has_answer": i == 2},
            {"role": "assistant", "content": "That sounds lovely."},
        ]
        for i, (_, text) in enumerate(TOPICS)
    ]
    data = [
        {
            "question_id": "q1",
            "question_type": "single-session-user",
            "question": "What did my daughter start?",
            "question_date": "2023/05/30 (Tue) 19:25",
            "answer": "violin",
            "haystack_session_ids": [f"sess_{i}" for i in range(len(sessions))],
            "haystack_dates": [f"2023/05/2{i} (Sat) 06:09" for i in range(len(sessions))],
            "haystack_sessions": sessions,
        }
    ]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_locomo_loader_maps_ids_and_skips_what_it_must(tmp_path: Path) -> None:
    [conv] = list(datasets.locomo(tiny_locomo(tmp_path / "l.json.gz"), "run1"))
    assert len(conv.sessions) == 1 and len(conv.sessions[0].messages) == 8
    first = conv.sessions[0].messages[0]
    assert first.name == "Ann" and first.role == "user"
    assert not first.content.startswith("Ann")  # the name is not repeated in the content
    assert conv.sessions[0].messages[1].role == "assistant"
    assert conv.sessions[0].messages[1].name == "Bob"
    # Category 5 is skipped; the broken reference keeps its valid half.
    assert len(conv.questions) == 5
    assert conv.missing_evidence == 1
    sid = conv.sessions[0].session_id
    assert conv.questions[0].evidence == (f"{conv.user_id}/{sid}:D1:1",)
    assert conv.questions[0].now > first.created_at
    assert conv.user_name == "Ann"  # bound as the user's display name once ingested


async def test_ingest_binds_speaker_a_as_the_user_s_name(tmp_path: Path) -> None:
    [conv] = list(datasets.locomo(tiny_locomo(tmp_path / "l.json.gz"), "run1"))
    async with await AsyncMemory.open(make_settings(tmp_path)) as mem:
        await evaluation.ingest(mem, conv)
        identity = await mem.identity(conv.user_id)
    assert identity.display_name == "Ann"


def test_longmemeval_loader(tmp_path: Path) -> None:
    [conv] = list(datasets.longmemeval(tiny_longmemeval(tmp_path / "m.json"), "run1"))
    assert len(conv.sessions) == 4
    [q] = conv.questions
    assert q.evidence == (f"{conv.user_id}/{conv.sessions[2].session_id}:t0",)
    assert q.now.year == 2023 and q.now.hour == 19


async def test_run_finds_planted_evidence_and_cleans_up(tmp_path: Path) -> None:
    settings = evaluation.eval_settings(make_settings(tmp_path), semantic_budget=200, top_k=20)
    async with await AsyncMemory.open(settings) as mem:
        report = await evaluation.run(
            mem, "locomo", tiny_locomo(tmp_path / "l.json.gz"), semantic_budget=200
        )
        async with mem.db_sessions() as s:
            leftovers = [await ledger.count_messages(s, u) for u in report.user_ids]
    assert report.questions == 5
    assert report.hits["single-hop"] == 4  # each question's own turn is recalled
    assert 0.0 < report.recall <= 1.0
    assert report.summary()["n"] == 5
    assert set(report.by("group")) == {"conv-x"}
    # Every evidence turn is either kept or missed for a reason the manifest gives.
    assert sum(report.hits.values()) + sum(report.missed.values()) == report.n
    assert leftovers == [0]  # the eval's users are forgotten afterwards
    with pytest.raises(ValidationError):
        async with await AsyncMemory.open(settings) as mem:
            await evaluation.run(mem, "locomo", tmp_path / "none.json", semantic_budget=200)


def test_micro_and_macro_differ_as_defined() -> None:
    report = evaluation.Report("locomo", 1000)
    # One question finds 1 of 4 turns, another 1 of 1: micro 2/5, macro (0.25 + 1) / 2.
    report.add(evaluation.Outcome("multi-hop", "c1", 1, 4, 900), 10.0)
    report.add(evaluation.Outcome("single-hop", "c2", 1, 1, 700), 20.0)
    assert report.recall == pytest.approx(0.4)
    assert report.macro == pytest.approx(0.625)
    assert report.mean_tokens == 800
    assert report.hits == {"multi-hop": 1, "single-hop": 1}
    assert [r[0] for r in evaluation.rows(report, "group")] == ["c1", "c2"]
    assert report.summary()["by_group"]["c1"] == {"micro": 0.25, "macro": 0.25}
    assert report.missed == {}


def test_missed_evidence_takes_its_last_reason() -> None:
    def item(msg: str, reason: str) -> ManifestItem:
        return ManifestItem("semantic", msg, (msg,), "", 5, False, reason)

    # A second chunk of m1 was a duplicate while gathering; m1 itself fell to the budget.
    manifest = [item("m1", "duplicate"), item("m1", "budget"), item("m3", "stale_value")]
    result = SimpleNamespace(manifest=manifest)
    q = datasets.Question("q?", "multi-hop", datetime.now(UTC), ("m1", "m2", "m3", "m4"))
    missed = evaluation.missed(result, q, kept={"m4"})  # type: ignore[arg-type]
    assert missed == {"budget": 1, "not_found": 1, "stale_value": 1}


def test_eval_command_prints_json_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    data = tiny_longmemeval(tmp_path / "m.json")
    result = CliRunner().invoke(app, ["eval", "longmemeval", "--data", str(data)])
    assert result.exit_code == 0, result.output
    last = json.loads(result.output.strip().splitlines()[-1])
    assert set(last) == {
        "recall", "macro", "n", "questions", "tokens", "missed", "by_group", "p50_ms", "p95_ms"
    }  # fmt: skip
    assert last["n"] == 1 and last["recall"] == 1.0 and last["macro"] == 1.0
    assert last["by_group"] == {"single-session-user": {"micro": 1.0, "macro": 1.0}}
    assert 0 < last["tokens"] <= 2000
    bad = CliRunner().invoke(app, ["eval", "squad", "--data", str(data)])
    assert bad.exit_code == 2


async def test_calibrate_cut_drops_the_share_asked(tmp_path: Path) -> None:
    settings: Settings = make_settings(tmp_path)
    async with await AsyncMemory.open(settings) as mem:
        for i, (_, text) in enumerate(TOPICS * 3):
            await mem.remember("cal-user", "cal-s", "user", f"{text} ({i})")
        await mem.drain(summarize=False)
        cal = await calibration.calibrate(mem, sample=12)
        asked = await calibration.calibrate(
            mem, queries=["pottery bowl", "garden"], user_id="cal-user"
        )
        with pytest.raises(ValidationError):
            await calibration.calibrate(mem, queries=["x"])
        with pytest.raises(ValidationError):
            await calibration.calibrate(mem, drop_share=1.5)
    assert cal.queries == 12 and cal.distances
    assert cal.threshold is not None
    above = sum(d > cal.threshold for d in cal.distances) / len(cal.distances)
    assert abs(above - 0.4) < 0.1
    assert asked.queries == 2 and asked.distances


@pytest.mark.slow
async def test_locomo_conversation_recall_floor(tmp_path: Path) -> None:
    """One real LoCoMo conversation with the default embedder: a floor, not the figure."""
    data = EVAL_DATA / "locomo_dev5.json.gz"
    if not data.exists():
        pytest.skip(f"no evaluation data at {data}")
    settings = evaluation.eval_settings(
        make_settings(tmp_path, embedder="minilm"), semantic_budget=1000, top_k=50
    )
    async with await AsyncMemory.open(settings) as mem:
        report = await evaluation.run(mem, "locomo", data, semantic_budget=1000, limit=1)
    assert report.n > 150
    assert report.recall >= 0.55
