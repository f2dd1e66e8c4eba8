"""``memstack eval facts``: how well facts are extracted, scored through the public API.

A case is 1-4 messages of one user and the facts that must be current after them
(``expected``) or must not be (``absent``: questions, hypotheticals, other people's
facts, withdrawn values). Each case gets a fresh user; its messages are remembered one
minute apart as the user, then ``drain()`` and ``facts(user)``. Extraction is judged as
a caller sees it, so the vocabulary, the fact store's supersede and withdrawal rules and
ingest all count, not the extractor alone.

The case format and the comparison rules are those of the shared facts dataset's README
(eval-data/facts_README.md), and the numbers must equal its reference scorer's on the
same file (tests/test_fact_eval.py checks this when the scorer is at hand): text is
compared after NFKC, casefold and dropping whitespace and punctuation, equal or (both of
two or more characters) one containing the other; a list matches as a set under that
rule; an amount on equal amount and currency. precision = TP / (TP + wrong values +
present absent keys), recall = TP / expected facts. Extra facts cost nothing.
"""

from __future__ import annotations

import json
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstack.core.errors import ValidationError

if TYPE_CHECKING:
    from memstack import AsyncMemory
    from memstack.core.settings import Settings

MONEY_KEYS = frozenset({"budget_limit"})
LIST_KEYS = frozenset(
    {"likes", "dislikes", "focus", "do_not_recommend", "allergies", "family", "pets"}
)
TEXT_KEYS = frozenset({"name", "city", "occupation", "language", "goal", "diet", "birthday"})
KEYS = MONEY_KEYS | LIST_KEYS | TEXT_KEYS
# The reference scorer's clock: the same times make the same facts (late messages,
# validity) whichever of the two runs a file.
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
MAX_MESSAGES = 4


# --- comparison ----------------------------------------------------------------------------


def norm(text: Any) -> str:
    """NFKC, casefold, every whitespace and punctuation character removed."""
    s = unicodedata.normalize("NFKC", str(text)).casefold()
    return "".join(c for c in s if not c.isspace() and not unicodedata.category(c).startswith("P"))


def text_match(want: Any, got: Any) -> bool:
    """Equal norms, or one containing the other when both have two characters or more:
    "Samsung" ~ "Samsung phones", "花生" ~ "花生过敏"; "猫" never matches "橘猫"."""
    a, b = norm(want), norm(got)
    if not a or not b:
        return False
    return a == b or (min(len(a), len(b)) >= 2 and (a in b or b in a))


def list_match(want: Sequence[Any], got: Any) -> bool:
    """Set equality under :func:`text_match`: every expected item matches some item got,
    and every item got matches some expected item."""
    items = got if isinstance(got, list) else [got]
    items = [g for g in items if norm(g)]
    if not items:
        return False
    return all(any(text_match(w, g) for g in items) for w in want) and all(
        any(text_match(w, g) for w in want) for g in items
    )


def money_match(want: dict[str, Any], got: Any) -> bool:
    if not isinstance(got, dict):
        return False
    raw: Any = got.get("amount")
    try:
        amount = float(raw)
    except (TypeError, ValueError, OverflowError):
        return False
    currency = str(got.get("currency", "")).upper()
    return bool(abs(amount - want["amount"]) < 1e-6 and currency == want["currency"])


def value_match(key: str, want: Any, got: Any) -> bool:
    if key in MONEY_KEYS:
        return money_match(want, got)
    if key in LIST_KEYS:
        return list_match(want, got)
    if isinstance(got, list):  # a one-item list for a text key is read as its item
        return len(got) == 1 and text_match(want, got[0])
    if isinstance(got, dict):
        return False
    return text_match(want, got)


# --- cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    lang: str
    messages: tuple[str, ...]
    expected: dict[str, Any]  # key -> value, in the file's order
    absent: tuple[str, ...]
    note: str = ""


def _check_value(key: str, value: Any) -> bool:
    if key in MONEY_KEYS:
        amount = value.get("amount") if isinstance(value, dict) else None
        return (
            isinstance(amount, int) and not isinstance(amount, bool) and bool(value.get("currency"))
        )
    if key in LIST_KEYS:
        return isinstance(value, list) and bool(value) and all(isinstance(i, str) for i in value)
    return isinstance(value, str) and bool(value)


def parse_case(c: Any, seen_ids: set[str]) -> Case:
    """One case as the README defines it; :class:`ValueError` names what is wrong."""
    if not isinstance(c, dict):
        raise ValueError("a case is a JSON object")
    if not isinstance(c.get("id"), str) or not c["id"] or c["id"] in seen_ids:
        raise ValueError("missing or duplicate id")
    if c.get("lang") not in ("zh", "en"):
        raise ValueError('lang must be "zh" or "en"')
    msgs = c.get("messages")
    if not (isinstance(msgs, list) and 1 <= len(msgs) <= MAX_MESSAGES):
        raise ValueError(f"messages must be a list of 1-{MAX_MESSAGES} texts")
    if not all(isinstance(m, str) and m.strip() for m in msgs):
        raise ValueError("every message must be a non-blank text")
    expected: dict[str, Any] = {}
    if not isinstance(c.get("expected", []), list):
        raise ValueError("expected must be a list")
    for e in c.get("expected", []):
        key = e.get("key") if isinstance(e, dict) else None
        if key not in KEYS or key in expected:
            raise ValueError(f"expected key {key!r} is unknown or repeated")
        if not _check_value(key, e.get("value")):
            raise ValueError(f"expected value of {key} has the wrong shape")
        expected[key] = e["value"]
    absent = c.get("absent", [])
    if not isinstance(absent, list) or not all(k in KEYS for k in absent):
        raise ValueError("absent must list known keys")
    if set(absent) & set(expected):
        raise ValueError("a key cannot be both expected and absent")
    if not expected and not absent:
        raise ValueError("a case must expect or forbid something")
    note = c.get("note", "")
    return Case(c["id"], c["lang"], tuple(msgs), expected, tuple(absent), str(note))


def load_cases(path: Path) -> list[Case]:
    """The cases of a JSONL file; :class:`ValidationError` names the first bad line."""
    cases: list[Case] = []
    ids: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                case = parse_case(raw, ids)
            except ValueError as exc:  # json.JSONDecodeError included
                raise ValidationError(f"{path}:{n}: {exc}") from None
            ids.add(case.id)
            cases.append(case)
    return cases


# --- running -------------------------------------------------------------------------------

ProgressFn = Callable[[int, int], None]


async def run_case(mem: AsyncMemory, case: Case, user_id: str) -> dict[str, Any]:
    """The user's current facts ``{key: value}`` after the case's messages."""
    session_id = f"s-{user_id}"
    for j, text in enumerate(case.messages):
        await mem.remember(user_id, session_id, "user", text, ts=T0 + timedelta(minutes=j))
    # Summaries never write facts (only ingest does): skipping them saves time.
    await mem.drain(summarize=False)
    got: dict[str, Any] = {}
    for fact in await mem.facts(user_id):  # most confident first; a key should appear once
        got.setdefault(fact.key, fact.value)
    return got


async def run_cases(
    mem: AsyncMemory, cases: Sequence[Case], progress: ProgressFn | None = None
) -> list[dict[str, Any]]:
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
    failures: list[Failure] = field(default_factory=list)


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
        lang = out.by_lang.setdefault(case.lang, Tally())
        for name in ("cases", "tp", "fp", "fn", "expected", "passed"):
            setattr(lang, name, getattr(lang, name) + getattr(t, name))
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


def failure_text(f: Failure) -> str:
    c = f.case
    return (
        f"FAIL {c.id} [{c.lang}] {'; '.join(f.problems)} | {c.note}\n"
        f"  messages: {json.dumps(list(c.messages), ensure_ascii=False)}\n"
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

        async def go() -> list[dict[str, Any]]:
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
    scored = score(cases, results)
    for failure in scored.failures:
        console.print(failure_text(failure), markup=False, highlight=False, soft_wrap=True)
    console.print(per_key_line(scored), markup=False, highlight=False, soft_wrap=True)
    passed = sum(t.passed for t in scored.by_lang.values())
    console.print(f"cases fully correct: {passed}/{len(cases)}", highlight=False)
    print(json.dumps(summary(scored), ensure_ascii=False), flush=True)
