"""``memstack eval facts``: the comparison rules of the facts dataset, its counts, and the
command end to end, its numbers equal to the reference scorer's on the same file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memstack.cli import app
from memstack.core.errors import ValidationError
from memstack.eval.fact_cases import (
    Case,
    Turn,
    list_match,
    load_cases,
    money_match,
    text_match,
    value_match,
)
from memstack.eval.facts import score, summary

ROOT = Path(__file__).resolve().parents[1]
# CI machines keep the shared tools beside the checkout.
REFERENCE = Path(__file__).resolve().parents[2] / "shared/tools/score_facts.py"
CNY_5000 = {"amount": 5000, "currency": "CNY"}


# --- the comparison rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("want", "got", "match"),
    [
        ("Samsung", "Samsung phones", True),
        ("花生", "花生过敏", True),
        ("林晓雯", "晓雯", True),
        ("wife: Anna", "Wife Anna", True),  # punctuation and spaces do not count
        ("03-03", "0303", True),
        ("ＤＥＮＶＥＲ", "denver", True),  # NFKC folds full-width letters
        ("猫", "橘猫", False),  # one character only matches exactly
        ("猫", "猫", True),
        ("Denver", "Boulder", False),
        ("!!", "!!", False),  # nothing left to compare
    ],
)
def test_text_match(want: str, got: str, match: bool) -> None:
    assert text_match(want, got) is match


def test_list_money_and_text_values() -> None:
    assert list_match(["peanuts", "芒果"], ["芒果", "Peanut"])
    assert not list_match(["peanuts"], ["peanuts", "shellfish"])  # an extra item got
    assert not list_match(["peanuts", "shellfish"], ["peanuts"])  # an item missing
    assert list_match(["two kids"], "two kids")  # a bare text is a one-item list
    assert not list_match(["x"], [])
    assert money_match(CNY_5000, {"amount": 5000.0, "currency": "cny"})
    assert money_match(CNY_5000, {"amount": "5000", "currency": "CNY"})
    assert not money_match(CNY_5000, {"amount": 5000, "currency": "USD"})
    assert not money_match(CNY_5000, {"amount": None, "currency": "CNY"})
    assert not money_match(CNY_5000, 5000)
    assert value_match("diet", "vegetarian", ["vegetarian"])  # a one-item list of text
    assert not value_match("diet", "vegetarian", ["vegetarian", "keto"])
    assert not value_match("city", "Denver", {"name": "Denver"})
    assert value_match("birthday", "03-03", "03-03")


# --- counting ------------------------------------------------------------------------------


def case(cid: str, lang: str, expected: dict[str, Any], absent: tuple[str, ...] = ()) -> Case:
    return Case(cid, lang, (Turn("m"),), expected, absent, note=f"note {cid}")


def test_score_counts_as_the_readme_says() -> None:
    cases = [
        case("a", "zh", {"budget_limit": CNY_5000, "city": "上海"}),
        case("b", "en", {"family": ["wife: Anna"], "pets": ["dog"]}, absent=("diet",)),
        case("c", "en", {"name": "Bob"}, absent=("budget_limit",)),
    ]
    got: list[dict[str, Any]] = [
        {"budget_limit": CNY_5000, "likes": ["x"]},  # city missing; an extra key is free
        {"family": ["wife: Anna"], "pets": ["cat"], "diet": "vegan"},  # pets wrong, diet
        {"name": "Bob"},
    ]
    s = score(cases, got)
    assert [(f.case.id, f.problems) for f in s.failures] == [
        ("a", ["missing city"]),
        ("b", ["wrong pets", "absent-violation diet"]),
    ]
    assert {k: (t.tp, t.fn, t.fp) for k, t in s.per_key.items()} == {
        "budget_limit": (1, 0, 0),
        "city": (0, 1, 0),
        "family": (1, 0, 0),
        "pets": (0, 1, 1),
        "diet": (0, 0, 1),
        "name": (1, 0, 0),
    }
    # TP 3; FP 2 (a wrong value, a present absent key); 5 expected facts.
    assert summary(s) == {
        "cases": 3,
        "precision": 0.6,
        "recall": 0.6,
        "f1": 0.6,
        "by_lang": {
            "en": {
                "cases": 2,
                "tp": 2,
                "fp": 2,
                "fn": 1,
                "expected": 3,
                "passed": 1,
                "precision": 0.5,
                "recall": 0.6667,
                "f1": 0.5714,
            },
            "zh": {
                "cases": 1,
                "tp": 1,
                "fp": 0,
                "fn": 1,
                "expected": 2,
                "passed": 0,
                "precision": 1.0,
                "recall": 0.5,
                "f1": 0.6667,
            },
        },
    }


def write_cases(path: Path, cases: list[dict[str, Any]]) -> Path:
    path.write_text(
        "\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n", encoding="utf-8"
    )
    return path


GOOD = {"id": "x", "lang": "en", "messages": ["hi"], "expected": [], "absent": ["name"]}


@pytest.mark.parametrize(
    "bad",
    [
        {**GOOD, "lang": "fr"},
        {**GOOD, "messages": []},
        {**GOOD, "messages": ["a"] * 9},  # at most 8 turns
        {**GOOD, "messages": ["  "]},
        {**GOOD, "messages": [{"role": "system", "text": "x"}]},
        {**GOOD, "messages": [{"role": "user", "name": " ", "text": "x"}]},
        {**GOOD, "messages": [{"role": "user", "text": "x", "ts": 1}]},
        {**GOOD, "trap": ["not-a-trap"]},
        {**GOOD, "identity": [""]},
        {**GOOD, "expected": [{"key": "budget", "value": CNY_5000}]},  # a synonym
        {**GOOD, "expected": [{"key": "budget_limit", "value": 5000}]},
        {**GOOD, "expected": [{"key": "pets", "value": "cat"}]},
        {**GOOD, "expected": [{"key": "name", "value": "A"}, {"key": "name", "value": "B"}]},
        {**GOOD, "expected": [{"key": "name", "value": "A"}]},  # also absent
        {**GOOD, "absent": []},  # nothing to score
        {**GOOD, "absent": ["budget"]},
    ],
)
def test_load_cases_refuses_what_the_readme_forbids(tmp_path: Path, bad: dict[str, Any]) -> None:
    path = write_cases(tmp_path / "c.jsonl", [GOOD | {"id": "ok"}, bad])
    with pytest.raises(ValidationError, match=r"c\.jsonl:2"):
        load_cases(path)


def test_load_cases_refuses_a_repeated_id_and_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(GOOD) + "\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"c\.jsonl:3: missing or duplicate id"):
        load_cases(path)
    path.write_text(json.dumps(GOOD) + "\n\n", encoding="utf-8")
    [only] = load_cases(path)
    assert (only.id, only.messages, only.absent) == ("x", (Turn("hi"),), ("name",))


# --- end to end, with a scripted LLM so the facts do not depend on the rules of the day ----

# What the model says about each message; a message not listed has no facts.
ANSWERS: dict[str, list[dict[str, Any]]] = {
    "我预算不超过五千": [{"key": "budget_limit", "value": CNY_5000, "source": "user_stated"}],
    "My wife Anna and I adopted a golden retriever, Biscuit.": [
        {"key": "family", "value": ["wife: Anna"], "source": "user_stated"},
        {"key": "pets", "value": ["dog: Biscuit"], "source": "user_stated"},
    ],
    "What budget should I set for a laptop?": [
        {"key": "budget_limit", "value": 1000, "source": "user_stated"}
    ],
    "我吃素": [{"key": "diet", "value": "素食", "source": "user_stated"}],
    "不过现在不吃素了": [{"key": "diet", "value": None, "retracts": True, "source": "user_stated"}],
    "I'm allergic to peanuts": [
        {"key": "allergies", "value": "peanut allergy", "source": "user_stated"}
    ],
    "I live in Denver now": [{"key": "city", "value": "Denver, Colorado", "source": "user_stated"}],
}
CASES: list[dict[str, Any]] = [
    {"id": "budget", "lang": "zh", "messages": ["我预算不超过五千"], "expected": [
        {"key": "budget_limit", "value": CNY_5000}]},
    {"id": "family-pets", "lang": "en",
     "messages": ["My wife Anna and I adopted a golden retriever, Biscuit."], "expected": [
         {"key": "family", "value": ["wife: Anna"]},
         {"key": "pets", "value": ["golden retriever: Biscuit"]}]},
    {"id": "question", "lang": "en", "messages": ["What budget should I set for a laptop?"],
     "expected": [], "absent": ["budget_limit"]},
    {"id": "retracted", "lang": "zh", "messages": ["我吃素", "不过现在不吃素了"],
     "expected": [], "absent": ["diet"]},
    {"id": "allergy-birthday", "lang": "en",
     "messages": ["I'm allergic to peanuts", "my birthday is March 3rd"], "expected": [
         {"key": "allergies", "value": ["peanuts"]}, {"key": "birthday", "value": "03-03"}]},
    {"id": "contains", "lang": "en", "messages": ["I live in Denver now"],
     "expected": [{"key": "city", "value": "Denver"}]},
]  # fmt: skip
# TP: budget, family, allergies (peanut ~ peanuts), city (Denver ~ "Denver, Colorado").
# FP: pets (wrong animal), budget_limit (present though absent). FN: pets, birthday.
EXPECTED = {
    "cases": 6,
    "precision": 0.6667,
    "recall": 0.6667,
    "f1": 0.6667,
    "by_lang": {
        "en": {"cases": 4, "tp": 3, "fp": 2, "fn": 2, "expected": 5, "passed": 1,
               "precision": 0.6, "recall": 0.6, "f1": 0.6},
        "zh": {"cases": 2, "tp": 1, "fp": 0, "fn": 0, "expected": 1, "passed": 2,
               "precision": 1.0, "recall": 1.0, "f1": 1.0},
    },
}  # fmt: skip


class _Model(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = json.loads(body["messages"][-1]["content"])
        texts = [m["text"] for m in request["messages"]]
        content = json.dumps(
            {"facts_by_message": {str(i): ANSWERS.get(t, []) for i, t in enumerate(texts)}},
            ensure_ascii=False,
        )
        data = json.dumps(
            {"object": "chat.completion", "choices": [{"message": {"content": content}}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def model_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def llm_env(model_url: str) -> dict[str, str]:
    return {
        "MEMSTACK_EXTRACTOR": "llm",
        "MEMSTACK_LLM_URL": model_url,
        "MEMSTACK_LLM_MODEL": "scripted",
        "MEMSTACK_SUMMARISER": "extractive",
        "MEMSTACK_EMBEDDER": "hashing",
    }


def run_eval(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], *args: str
) -> Any:
    for var in ("MEMSTACK_REDIS_URL", "MEMSTACK_DATABASE_URL", "MEMSTACK_VECTOR_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return CliRunner().invoke(app, ["eval", "facts", *args])


def test_eval_facts_scores_through_the_public_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_url: str
) -> None:
    data = write_cases(tmp_path / "cases.jsonl", CASES)
    result = run_eval(monkeypatch, tmp_path, llm_env(model_url), "--data", str(data))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert json.loads(lines[-1]) == EXPECTED
    fails = [line for line in lines if line.startswith("FAIL ")]
    # "retracted" passes: the model's withdrawal reached the fact store.
    assert fails == [
        "FAIL family-pets [en] wrong pets | ",
        "FAIL question [en] absent-violation budget_limit | ",
        "FAIL allergy-birthday [en] missing birthday | ",
    ]
    assert any(line.startswith("per key") and "pets=0/1(fp1)" in line for line in lines)
    assert "cases fully correct: 3/6" in result.output
    limited = run_eval(
        monkeypatch, tmp_path, llm_env(model_url), "--data", str(data), "--limit", "1"
    )
    assert json.loads(limited.output.strip().splitlines()[-1])["cases"] == 1


def test_eval_facts_equals_the_reference_scorer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_url: str
) -> None:
    if not REFERENCE.exists():
        pytest.skip(f"no reference scorer at {REFERENCE}")
    data = write_cases(tmp_path / "cases.jsonl", CASES)
    ours = run_eval(monkeypatch, tmp_path, llm_env(model_url), "--data", str(data))
    assert ours.exit_code == 0, ours.output
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    env |= llm_env(model_url) | {"PYTHONPATH": str(ROOT)}
    ref = subprocess.run(
        [sys.executable, str(REFERENCE), str(data), "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ref.returncode == 0, ref.stderr
    theirs = json.loads(ref.stdout.strip().splitlines()[-1])
    assert json.loads(ours.output.strip().splitlines()[-1]) == theirs == EXPECTED


def test_eval_facts_refuses_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"MEMSTACK_EMBEDDER": "hashing"}
    missing = run_eval(monkeypatch, tmp_path, env, "--data", str(tmp_path / "none.jsonl"))
    assert missing.exit_code == 2
    bad = write_cases(tmp_path / "bad.jsonl", [{**GOOD, "lang": "fr"}])
    result = run_eval(monkeypatch, tmp_path, env, "--data", str(bad))
    assert result.exit_code == 2 and "bad.jsonl:1" in result.output
    good = write_cases(tmp_path / "good.jsonl", [GOOD])
    assert run_eval(monkeypatch, tmp_path, env, "--data", str(good), "--top-k", "5").exit_code == 2


def test_the_projects_fact_cases_follow_their_format() -> None:
    """Every file of eval-data/facts loads (FORMAT.md), ids unique across files, every
    case labelled with its trap classes."""
    files = sorted((ROOT / "eval-data" / "facts").glob("*.jsonl"))
    assert len(files) >= 8
    ids: set[str] = set()
    for path in files:
        cases = load_cases(path)
        assert cases and all(c.traps for c in cases), path
        assert not ids & {c.id for c in cases}, path
        ids |= {c.id for c in cases}
    speakers = [c for f in files for c in load_cases(f) if any(t.name for t in c.messages)]
    assert len(speakers) >= 50  # several-speaker cases, named participants and aliases


def test_traps_and_the_candidate_tier_are_scored_apart() -> None:
    from dataclasses import replace

    from memstack.eval.facts import CaseResult, candidate_summary, trap_lines

    quoted = replace(case("q", "en", {"city": "Lyon"}, ("budget_limit",)), traps=("quoted",))
    slip = replace(case("s", "en", {"city": "Lille"}), traps=("self_correction", "plain"))
    results = [
        CaseResult({"city": "Lyon", "budget_limit": CNY_5000}, {}),
        CaseResult({}, {"city": "Lille"}),  # right, but waiting for review
    ]
    scored = score([quoted, slip], [r.facts for r in results])
    lines = trap_lines(scored)
    assert "trap quoted: precision 0.500 recall 1.000 (tp 1, fp 1" in lines[1]
    assert lines[2].startswith("trap self_correction: precision - recall 0.000")
    tier = candidate_summary([quoted, slip], results)
    assert (tier["pending"], tier["right"], tier["wrong"], tier["precision"]) == (1, 1, 0, 1.0)
    assert tier["if_all_confirmed"]["recall"] == 1.0
