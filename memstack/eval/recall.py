"""Retrieval evaluation on LoCoMo and LongMemEval: ``memstack eval``.

Each conversation goes in through the public write path (``remember`` with the dataset's
own ids and timestamps, then the worker via ``drain``; a LoCoMo-format speaker A's
name is then bound as the user's, as an application naming its user's messages would);
each question goes to ``context()`` with ``now`` at the question's time, in a session
of its own, so nothing but recall can bring the evidence back. The score is **evidence
recall**: the share of the dataset's evidence turns whose ``msg_id`` is among the kept
items of the related history. The semantic layer gets exactly the given budget (the
other layers get none), so the figure says what that many tokens of recall hold.

Two means are reported, as the literature uses both: **micro** (evidence turns found over
all evidence turns; a question with seven evidence turns counts seven times) and
**macro** (the mean over questions of each question's share found). Each is given per
category and per group (a LoCoMo conversation; a LongMemEval question type), since a
change that lifts the total by helping one conversation is not a better read path.

The data is read from where it lies (``--data``, :mod:`memstack.eval.datasets`).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memstack import AsyncMemory, ContextResult
from memstack.core.errors import ValidationError
from memstack.core.settings import Settings
from memstack.eval.datasets import LOADERS, Conversation, Dataset, Question


@dataclass(frozen=True)
class Outcome:
    """One question's result: evidence found of its total, and the tokens recall used."""

    category: str
    group: str
    hit: int
    total: int
    tokens: int
    # Evidence turns not kept, by the manifest's reason ("not_found": no channel found it).
    missed: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Report:
    dataset: str
    semantic_budget: int
    outcomes: list[Outcome] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    missing_evidence: int = 0
    ingest_s: float = 0.0
    degraded: dict[str, int] = field(default_factory=dict)
    user_ids: list[str] = field(default_factory=list)

    def add(self, outcome: Outcome, latency_ms: float) -> None:
        self.outcomes.append(outcome)
        self.latencies_ms.append(latency_ms)

    @property
    def questions(self) -> int:
        return len(self.outcomes)

    @property
    def hits(self) -> dict[str, int]:
        return {cat: sum(o.hit for o in outs) for cat, outs in self.by("category").items()}

    @property
    def totals(self) -> dict[str, int]:
        return {cat: sum(o.total for o in outs) for cat, outs in self.by("category").items()}

    @property
    def n(self) -> int:
        return sum(o.total for o in self.outcomes)

    @property
    def recall(self) -> float:
        return micro(self.outcomes)

    @property
    def macro(self) -> float:
        return macro(self.outcomes)

    @property
    def missed(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            for reason, n in o.missed.items():
                out[reason] = out.get(reason, 0) + n
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def mean_tokens(self) -> float:
        return statistics.fmean(o.tokens for o in self.outcomes) if self.outcomes else 0.0

    def by(self, key: Literal["category", "group"]) -> dict[str, list[Outcome]]:
        out: dict[str, list[Outcome]] = {}
        for o in self.outcomes:
            out.setdefault(getattr(o, key), []).append(o)
        return dict(sorted(out.items()))

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return 0.0
        if len(self.latencies_ms) == 1:
            return self.latencies_ms[0]
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[int(p) - 1]

    def summary(self) -> dict[str, Any]:
        return {
            "recall": round(self.recall, 4),
            "macro": round(self.macro, 4),
            "n": self.n,
            "questions": self.questions,
            "tokens": round(self.mean_tokens, 1),
            "missed": self.missed,
            "by_group": {
                g: {"micro": round(micro(outs), 4), "macro": round(macro(outs), 4)}
                for g, outs in self.by("group").items()
            },
            "p50_ms": round(self.percentile(50), 1),
            "p95_ms": round(self.percentile(95), 1),
        }


def micro(outcomes: Sequence[Outcome]) -> float:
    total = sum(o.total for o in outcomes)
    return sum(o.hit for o in outcomes) / total if total else 0.0


def macro(outcomes: Sequence[Outcome]) -> float:
    return statistics.fmean(o.hit / o.total for o in outcomes) if outcomes else 0.0


# --- running -----------------------------------------------------------------------------------


def eval_settings(base: Settings, *, semantic_budget: int, top_k: int | None = None) -> Settings:
    """``base`` with the whole budget on related history; ``top_k`` overrides the pool."""
    update: dict[str, Any] = {
        "share_window": 0.0,
        "share_facts": 0.0,
        "share_knowledge": 0.0,
        "share_semantic": 1.0,
        # The token budget, not a count, decides how many snippets fit.
        "vector_keep": 10_000,
        "budget_tokens": max(semantic_budget, 1),
    }
    if top_k is not None:
        update["vector_top_k"] = top_k
    return base.model_copy(update=update)


ProgressFn = Callable[[str, int, int], None]


async def ingest(mem: AsyncMemory, conv: Conversation) -> None:
    for session in conv.sessions:
        for m in session.messages:
            # A dataset message's id is the caller's idempotency key (scoped on storing).
            await mem.remember(
                m.user_id,
                m.session_id,
                m.role,
                m.content,
                msg_id=m.msg_id,
                ts=m.created_at,
                name=m.name,
            )
    # Summaries would only add summary chunks, which recall does not quote.
    await mem.drain(summarize=False)
    if conv.user_name is not None:
        # As an application that names its user's messages binds that name: questions
        # name the person. Bound after the worker ran, so ingestion is as before.
        await mem.set_identity(conv.user_id, display_name=conv.user_name)


async def ask(
    mem: AsyncMemory, conv: Conversation, q: Question, semantic_budget: int, report: Report
) -> None:
    session_id = f"{conv.user_id}-qa"
    reserved = mem.recall.reserved_tokens(q.text, "en")
    started = time.perf_counter()
    result = await mem.context(
        conv.user_id,
        session_id,
        q.text,
        budget_tokens=semantic_budget + reserved,
        now=q.now,
        locale="en",
    )
    latency = (time.perf_counter() - started) * 1000
    for layer in result.degraded:
        report.degraded[layer] = report.degraded.get(layer, 0) + 1
    kept = result.kept_msg_ids("semantic")
    hit = sum(1 for e in q.evidence if e in kept)
    # Everything but the system text and the question: the history section as sent.
    used = result.tokens - reserved
    outcome = Outcome(q.category, q.group, hit, len(q.evidence), used, missed(result, q, kept))
    report.add(outcome, latency)


def missed(result: ContextResult, q: Question, kept: set[str]) -> dict[str, int]:
    """Why each evidence turn that was not kept was dropped: the last reason the manifest
    gives, which is the furthest stage it reached (a second chunk of a message dropped
    as a duplicate while gathering says less than the message's own drop for budget)."""
    reasons: dict[str, str] = {}
    for item in result.manifest:
        if item.layer == "semantic" and not item.kept:
            for m in item.msg_ids:
                reasons[m] = item.reason or "dropped"
    out: dict[str, int] = {}
    for e in q.evidence:
        if e not in kept:
            reason = reasons.get(e, "not_found")
            out[reason] = out.get(reason, 0) + 1
    return out


async def run(
    mem: AsyncMemory,
    dataset: Dataset,
    data: Path,
    *,
    semantic_budget: int,
    limit: int | None = None,
    progress: ProgressFn | None = None,
    cleanup: bool = True,
) -> Report:
    """Ingest and ask every conversation of ``data``; ``limit`` caps the conversations
    (LoCoMo) or questions (LongMemEval, one conversation each)."""
    if dataset not in LOADERS:
        raise ValidationError(f"dataset must be one of {sorted(LOADERS)}, got {dataset!r}")
    if semantic_budget <= 0:
        raise ValidationError(f"semantic budget must be positive, got {semantic_budget}")
    if limit is not None and limit <= 0:
        raise ValidationError(f"limit must be positive, got {limit}")
    run_id = "ev" + uuid.uuid4().hex[:8]
    convs = list(LOADERS[dataset](data, run_id))[:limit]
    report = Report(dataset, semantic_budget)
    # Every question through the same query model (not float32 until the int8 copy is up).
    await mem.prepare()
    total_q = sum(len(c.questions) for c in convs)
    done_q = 0
    try:
        for i, conv in enumerate(convs, start=1):
            report.missing_evidence += conv.missing_evidence
            report.user_ids.append(conv.user_id)
            if progress:
                progress(f"ingest {i}/{len(convs)}", done_q, total_q)
            started = time.perf_counter()
            await ingest(mem, conv)
            report.ingest_s += time.perf_counter() - started
            for q in conv.questions:
                await ask(mem, conv, q, semantic_budget, report)
                done_q += 1
                if progress:
                    progress(f"ask {i}/{len(convs)}", done_q, total_q)
    finally:
        if cleanup:
            for conv in convs:
                await mem.forget_user(conv.user_id)
    return report


def rows(
    report: Report, key: Literal["category", "group"]
) -> Sequence[tuple[str, int, float, float]]:
    """(name, evidence turns, micro, macro) per category or group."""
    return [
        (name, sum(o.total for o in outs), micro(outs), macro(outs))
        for name, outs in report.by(key).items()
    ]


# --- command line --------------------------------------------------------------------------------

DEFAULT_BUDGETS = {"locomo": 1000, "longmemeval": 2000}


def run_cli(
    console: Any,
    settings: Settings,
    dataset: str,
    data: Path,
    semantic_budget: int | None,
    limit: int | None,
    top_k: int | None,
    home: Path | None,
) -> None:
    """``memstack eval``: progress while it runs, a table per category, JSON last."""
    import asyncio
    import tempfile

    import typer
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from memstack.core.errors import MemstackError

    if dataset not in LOADERS:
        console.print(f"[red]error:[/red] dataset must be one of {sorted(LOADERS)}")
        raise typer.Exit(2)
    budget = semantic_budget or DEFAULT_BUDGETS[dataset]
    if top_k is not None and top_k <= 0:
        console.print("[red]error:[/red] --top-k must be positive")
        raise typer.Exit(2)
    with tempfile.TemporaryDirectory(prefix="memstack-eval-") as tmp:
        s = eval_settings(settings, semantic_budget=budget, top_k=top_k).model_copy(
            update={"home": home or Path(tmp)}
        )

        async def go() -> Report:
            async with await AsyncMemory.open(s) as mem:
                console.print(
                    f"[bold]{dataset}[/bold] {data}: semantic budget {budget} tokens, "
                    f"top-k {top_k or 'sized to the budget'}, "
                    f"embedder {mem.settings.embedder}, vectors {s.vector_store}, "
                    f"database {'PostgreSQL' if s.database_url else 'SQLite'}"
                )
                with Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=console,
                    transient=True,
                ) as bar:
                    task = bar.add_task("loading", total=None)

                    def progress(what: str, done: int, total: int) -> None:
                        bar.update(task, description=what, completed=done, total=total)

                    return await run(
                        mem,
                        dataset,  # type: ignore[arg-type]
                        data,
                        semantic_budget=budget,
                        limit=limit,
                        progress=progress,
                    )

        try:
            report = asyncio.run(go())
        except MemstackError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from exc
    _print_report(console, report, dataset, budget)


def _print_report(console: Any, report: Report, dataset: str, budget: int) -> None:
    """Tables per category and per group, a line of latency and warnings, JSON last."""
    from rich.table import Table

    for key in ("category", "group"):
        table = Table(title=f"{dataset}: evidence recall at {budget} tokens, by {key}")
        for col in (key, "evidence", "micro", "macro"):
            table.add_column(col)
        for name, n, mi, ma in rows(report, key):
            table.add_row(name, str(n), f"{mi:.3f}", f"{ma:.3f}")
        table.add_row(
            "[bold]all", str(report.n), f"[bold]{report.recall:.3f}", f"[bold]{report.macro:.3f}"
        )
        console.print(table)
    console.print(
        f"{report.questions} questions, {report.mean_tokens:.0f} tokens used a question "
        f"on average; context() p50 {report.percentile(50):.1f} ms, "
        f"p95 {report.percentile(95):.1f} ms; ingest {report.ingest_s:.0f} s"
        + (
            f"; evidence ids not in the data: {report.missing_evidence}"
            if report.missing_evidence
            else ""
        )
        + (f"; evidence not kept, by reason: {report.missed}" if report.missed else "")
        + (f"; degraded layers: {report.degraded}" if report.degraded else "")
    )
    print(json.dumps(report.summary()), flush=True)
