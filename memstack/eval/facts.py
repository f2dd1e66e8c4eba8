"""``memstack eval facts``: how well facts are extracted, scored through the public API.

A case is a short conversation and the user's facts that must be current after it
(``expected``) or must not be (``absent``: questions, hypotheticals, other people's
facts, withdrawn values); see :mod:`memstack.eval.fact_cases` for the format. Each case
gets a fresh user; its messages are remembered one minute apart (the user's own, other
named participants', the assistant's), then ``drain()`` and ``facts(user)``. Extraction
is judged as a caller sees it, so speaker attribution, the vocabulary, the fact store's
supersede and withdrawal rules, the candidate tier and ingest all count, not the
extractor alone.

The numbers of the last line must equal the shared facts dataset's reference scorer's on
the same file (tests/test_fact_eval.py checks this when the scorer is at hand):
precision = TP / (TP + wrong values + present absent keys), recall = TP / expected
facts. Extra facts cost nothing. Before it come precision per trap class and the
candidate tier, scored apart: what is pending review, and what the facts would be if
every pending candidate were confirmed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstack.eval.fact_cases import T0, Case, load_cases, value_match

if TYPE_CHECKING:
    from memstack import AsyncMemory
    from memstack.core.settings import Settings

# --- running -------------------------------------------------------------------------------

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class CaseResult:
    facts: dict[str, Any]  # the user's current facts, key -> value
    candidates: dict[str, Any]  # the newest pending candidate of each key


async def _bind(mem: AsyncMemory, case: Case, user_id: str, session_id: str) -> None:
    """Bind the case's names to a user who exists: names are bound to a user memstack
    has stored something of, so a system line opens the conversation first."""
    await mem.remember(
        user_id, session_id, "system", "conversation start", ts=T0 - timedelta(minutes=1)
    )
    await mem.drain(summarize=False)
    first, *rest = case.identity
    await mem.set_identity(user_id, display_name=first, aliases=rest)


async def run_case(mem: AsyncMemory, case: Case, user_id: str) -> CaseResult:
    """The user's current facts and pending candidates after the case's messages."""
    session_id = f"s-{user_id}"
    if case.identity:
        await _bind(mem, case, user_id, session_id)
    for j, turn in enumerate(case.messages):
        ts = T0 + timedelta(minutes=j)
        await mem.remember(user_id, session_id, turn.role, turn.text, ts=ts, name=turn.name)
    # Summaries never write facts (only ingest does): skipping them saves time.
    await mem.drain(summarize=False)
    got: dict[str, Any] = {}
    for fact in await mem.facts(user_id):  # most confident first; a key should appear once
        got.setdefault(fact.key, fact.value)
    pending: dict[str, Any] = {}
    for c in await mem.candidates(user_id):  # newest first
        pending.setdefault(c.key, c.value)
    return CaseResult(got, pending)


async def run_cases(
    mem: AsyncMemory, cases: Sequence[Case], progress: ProgressFn | None = None
) -> list[CaseResult]:
    run_id = uuid.uuid4().hex[:10]
    results = []
    for i, case in enumerate(cases):
        results.append(await run_case(mem, case, f"fx{i}-{run_id}"))
        if progress is not None:
            progress(i + 1, len(cases))
    return results


# --- scoring -------------------------------------------------------------------------------


@dataclass
class Tally:
    cases: int = 0
    tp: int = 0
    fp: int = 0
    fn: int = 0
    expected: int = 0
    passed: int = 0


@dataclass
class Failure:
    case: Case
    got: dict[str, Any]
    problems: list[str]


@dataclass
class Score:
    by_lang: dict[str, Tally] = field(default_factory=dict)
    per_key: dict[str, Tally] = field(default_factory=dict)
    by_trap: dict[str, Tally] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)


_TALLIED = ("cases", "tp", "fp", "fn", "expected", "passed")


def _add(into: dict[str, Tally], name: str, t: Tally) -> None:
    total = into.setdefault(name, Tally())
    for field_name in _TALLIED:
        setattr(total, field_name, getattr(total, field_name) + getattr(t, field_name))


def _count(key: str, per_key: dict[str, Tally], **add: int) -> None:
    t = per_key.setdefault(key, Tally())
    for name, n in add.items():
        setattr(t, name, getattr(t, name) + n)


def score(cases: Sequence[Case], results: Sequence[dict[str, Any]]) -> Score:
    """Per key: an expected key present with a matching value is a TP; otherwise an FN,
    and a wrong value present is also an FP, as is every present ``absent`` key."""
    out = Score()
    for case, got in zip(cases, results, strict=True):
        t = Tally(cases=1, expected=len(case.expected))
        problems: list[str] = []
        for key, want in case.expected.items():
            if key in got and value_match(key, want, got[key]):
                t.tp += 1
                _count(key, out.per_key, tp=1)
                continue
            t.fn += 1
            wrong = key in got
            t.fp += wrong
            _count(key, out.per_key, fn=1, fp=int(wrong))
            problems.append(f"{'wrong' if wrong else 'missing'} {key}")
        for key in case.absent:
            if key in got:
                t.fp += 1
                _count(key, out.per_key, fp=1)
                problems.append(f"absent-violation {key}")
        t.passed = int(not problems)
        _add(out.by_lang, case.lang, t)
        for trap in case.traps:
            _add(out.by_trap, trap, t)
        if problems:
            out.failures.append(Failure(case, got, problems))
    return out


def prf(tp: int, fp: int, n_expected: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / n_expected if n_expected else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4)}


def summary(s: Score) -> dict[str, Any]:
    """The last line of ``memstack eval facts``: the reference scorer's object."""
    langs = s.by_lang.values()
    tp, fp = sum(t.tp for t in langs), sum(t.fp for t in langs)
    n_expected = sum(t.expected for t in langs)
    by_lang = {
        lang: {**vars(t), **prf(t.tp, t.fp, t.expected)} for lang, t in sorted(s.by_lang.items())
    }
    return {
        "cases": sum(t.cases for t in langs),
        **prf(tp, fp, n_expected),
        "by_lang": by_lang,
    }


def trap_lines(s: Score) -> list[str]:
    """Precision and recall per trap class (a case counts under each of its classes);
    precision is "-" where nothing scored was served."""
    lines = []
    for trap, t in sorted(s.by_trap.items()):
        p = prf(t.tp, t.fp, t.expected)
        precision = f"{p['precision']:.3f}" if t.tp + t.fp else "-"
        lines.append(
            f"trap {trap}: precision {precision} recall {p['recall']:.3f} "
            f"(tp {t.tp}, fp {t.fp}, expected {t.expected}, {t.cases} cases)"
        )
    return lines


def candidate_summary(cases: Sequence[Case], results: Sequence[CaseResult]) -> dict[str, Any]:
    """The candidate tier, scored apart from the facts: how many keys are pending, how
    many of those a case scores, how many of those are right (an expected value the
    facts lack) or wrong (an absent key, a wrong value), and what precision and recall
    the facts would have if every pending candidate were confirmed."""
    pending = right = wrong = 0
    confirmed_all: list[dict[str, Any]] = []
    for case, r in zip(cases, results, strict=True):
        pending += len(r.candidates)
        for key, value in r.candidates.items():
            if key in case.absent:
                wrong += 1
            elif key in case.expected and not value_match(
                key, case.expected[key], r.facts.get(key)
            ):
                ok = value_match(key, case.expected[key], value)
                right += ok
                wrong += not ok
        confirmed_all.append({**r.facts, **r.candidates})
    if_confirmed = summary(score(cases, confirmed_all))
    return {
        "pending": pending,
        "scored": right + wrong,
        "right": right,
        "wrong": wrong,
        "precision": round(right / (right + wrong), 4) if right + wrong else None,
        "if_all_confirmed": {k: if_confirmed[k] for k in ("precision", "recall", "f1")},
    }


def _turn_text(c: Case) -> str:
    turns = [
        t.text if t.role == "user" and t.name is None else f"{t.name or t.role}: {t.text}"
        for t in c.messages
    ]
    return json.dumps(turns, ensure_ascii=False)


def failure_text(f: Failure) -> str:
    c = f.case
    return (
        f"FAIL {c.id} [{c.lang}] {'; '.join(f.problems)} | {c.note}\n"
        f"  messages: {_turn_text(c)}\n"
        f"  expected: {json.dumps(c.expected, ensure_ascii=False)} absent: {list(c.absent)}\n"
        f"  got:      {json.dumps(f.got, ensure_ascii=False, default=str)}"
    )


def per_key_line(s: Score) -> str:
    keys = " ".join(f"{k}={t.tp}/{t.tp + t.fn}(fp{t.fp})" for k, t in sorted(s.per_key.items()))
    return f"per key (matched/expected, fp): {keys}"


# --- command line --------------------------------------------------------------------------


def facts_eval_settings(base: Settings, home: Path) -> Settings:
    """``base`` on embedded stores in ``home``: a run never touches a server's data. The
    hashing embedder, because facts do not depend on vectors and it is the fastest; the
    extractor stays the caller's (MEMSTACK_EXTRACTOR=llm scores the LLM)."""
    return base.model_copy(
        update={
            "home": home,
            "redis_url": None,
            "database_url": None,
            "vector_url": None,
            "kb_url": None,
            "embedder": "hashing",
        }
    )


def run_cli(
    console: Any, settings: Settings, data: Path, limit: int | None, home: Path | None
) -> None:
    """``memstack eval facts``: failing cases, a per-key line, JSON last."""
    import asyncio
    import tempfile

    import typer
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from memstack import AsyncMemory
    from memstack.core.errors import MemstackError

    try:
        cases = load_cases(data)[:limit]
    except (OSError, MemstackError) as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        raise typer.Exit(2) from exc
    with tempfile.TemporaryDirectory(prefix="memstack-facts-eval-") as tmp:
        s = facts_eval_settings(settings, home or Path(tmp))
        console.print(
            f"facts {data}: {len(cases)} cases, extractor {s.extractor}, "
            f"embedded stores in {s.home}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

        async def go() -> list[CaseResult]:
            async with await AsyncMemory.open(s) as mem:
                with Progress(
                    BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                    transient=True,
                ) as bar:  # fmt: skip
                    task = bar.add_task("cases", total=len(cases))

                    def progress(done: int, total: int) -> None:
                        bar.update(task, completed=done, total=total)

                    return await run_cases(mem, cases, progress)

        try:
            results = asyncio.run(go())
        except MemstackError as exc:
            console.print(f"error: {exc}", markup=False, highlight=False)
            raise typer.Exit(1) from exc
    scored = score(cases, [r.facts for r in results])
    for failure in scored.failures:
        console.print(failure_text(failure), markup=False, highlight=False, soft_wrap=True)
    console.print(per_key_line(scored), markup=False, highlight=False, soft_wrap=True)
    for line in trap_lines(scored):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    passed = sum(t.passed for t in scored.by_lang.values())
    console.print(f"cases fully correct: {passed}/{len(cases)}", highlight=False)
    tier = json.dumps(candidate_summary(cases, results), ensure_ascii=False)
    console.print(f"candidates: {tier}", markup=False, highlight=False, soft_wrap=True)
    print(json.dumps(summary(scored), ensure_ascii=False), flush=True)
