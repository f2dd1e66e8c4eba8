"""Judging a run: what reached the stores against what was acknowledged and against a
clean replay of the same messages, as one :class:`Row` of the fault table.

:class:`Checker` waits until the workers have drained, reads the ledger, the vectors
and the facts (:func:`~tests.faults.stores.snapshot`), replays the acknowledged
messages into a clean deployment (:func:`replay`) and evaluates (:func:`evaluate`).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memstack.memory import AsyncMemory
from tests.faults.deployment import Deployment
from tests.faults.stores import Snapshot, VectorEntry, snapshot, wait_drained
from tests.faults.workload import STATED_KEYS, Sent

# --- the table ---------------------------------------------------------------------------

COLUMNS = (
    "scenario", "sent", "in ledger", "in vectors", "facts", "dead letters", "lost",
    "duplicates", "seconds",
)  # fmt: skip


@dataclass
class Row:
    scenario: str
    sent: int = 0
    in_ledger: int = 0
    in_vectors: int = 0
    facts: int = 0
    dead_letters: int = 0
    lost: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    drained: bool = True
    oracle_diffs: int | None = None
    notes: list[str] = field(default_factory=list)
    extra_failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.duplicates == 0
            and self.dead_letters == 0
            and self.drained
            and not self.oracle_diffs
            and not self.extra_failures
        )

    def cells(self) -> list[str]:
        return [
            self.scenario, str(self.sent), str(self.in_ledger), str(self.in_vectors),
            str(self.facts), str(self.dead_letters), str(self.lost), str(self.duplicates),
            f"{self.seconds:.1f}",
        ]  # fmt: skip

    def explain(self) -> str:
        """The table with this row, then every note: what a failing test prints."""
        lines = [format_table([self])]
        if not self.drained:
            lines.append("the ingest stream never drained")
        if self.oracle_diffs:
            lines.append(f"{self.oracle_diffs} differences from a clean replay")
        lines += [f"- {n}" for n in [*self.extra_failures, *self.notes]]
        return "\n".join(lines)


def format_table(rows: Sequence[Row]) -> str:
    """A Markdown table of the rows."""
    return markdown_table(COLUMNS, [r.cells() for r in rows])


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table of ``rows`` of cells under ``columns``, each column padded."""
    cells = [list(columns), *rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(c) for c in cells[1:])])


_UUIDISH = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{4,}|\b[0-9a-f]{10,}\b")


def _error_kind(error: str) -> str:
    """A dead letter's error without the ids that make every one of them unique."""
    return _UUIDISH.sub("…", error)[:160]


def sample(items: Iterable[str], n: int = 5) -> str:
    """The first ``n`` of ``items``, sorted, and how many more there are."""
    got = sorted(items)
    more = f" … (+{len(got) - n})" if len(got) > n else ""
    return ", ".join(got[:n]) + more


# --- checking ----------------------------------------------------------------------------


def compare(faulty: Snapshot, clean: Snapshot, acked: Iterable[str]) -> list[str]:
    """Differences between a faulty run and a clean replay of the same messages."""
    wanted = set(acked)
    diffs: list[str] = []

    def report(kind: str, keys: set[str], describe: Callable[[str], str]) -> None:
        if keys:
            diffs.append(
                f"{kind}: {len(keys)} (e.g. {'; '.join(describe(k) for k in sorted(keys)[:3])})"
            )

    fl = {k: v for k, v in faulty.ledger.items() if k in wanted}
    cl = {k: v for k, v in clean.ledger.items() if k in wanted}
    report("ledger rows only in the clean replay", set(cl) - set(fl), lambda k: k)
    report("ledger rows only in the faulty run", set(fl) - set(cl), lambda k: k)
    report(
        "ledger rows that differ",
        {k for k in set(fl) & set(cl) if fl[k] != cl[k]},
        lambda k: f"{k}: {fl[k]} vs {cl[k]}",
    )

    def vec_key(v: VectorEntry) -> tuple[str, tuple[str, ...], str, str]:
        return (
            v.document,
            v.msg_ids,
            str(v.metadata.get("user_id")),
            str(v.metadata.get("session_id")),
        )

    fv = {v.id: vec_key(v) for v in faulty.vectors if v.layer in ("dialogue", "inferred")}
    cv = {v.id: vec_key(v) for v in clean.vectors if v.layer in ("dialogue", "inferred")}
    report("vectors only in the clean replay", set(cv) - set(fv), lambda k: f"{k} {cv[k][1]}")
    report("vectors only in the faulty run", set(fv) - set(cv), lambda k: f"{k} {fv[k][1]}")
    report(
        "vectors whose text or msg_ids differ",
        {k for k in set(fv) & set(cv) if fv[k] != cv[k]},
        lambda k: f"{k}: msg_ids {fv[k][1]} vs clean {cv[k][1]}",
    )

    # Only the facts the workload states. The rules also find others in its sentences (a
    # goal in "my budget is $1063 for a desk chair"), and whether such a fact is kept
    # depends on what was known when its message was read: a message whose predecessor
    # still waits in a crashed worker's pending list is read without it
    # (docs/reliability.md, "What ingest order decides").
    fc = Counter(
        (f.user_id, f.key, f.value, f.msg_id, f.current)
        for f in faulty.facts
        if f.key in STATED_KEYS
    )
    cc = Counter(
        (f.user_id, f.key, f.value, f.msg_id, f.current)
        for f in clean.facts
        if f.key in STATED_KEYS
    )
    only_c, only_f = cc - fc, fc - cc
    if only_c:
        diffs.append(
            f"fact rows only in the clean replay: {sum(only_c.values())} (e.g. {list(only_c)[:2]})"
        )
    if only_f:
        diffs.append(
            f"fact rows only in the faulty run: {sum(only_f.values())} (e.g. {list(only_f)[:2]})"
        )
    return diffs


def evaluate(
    scenario: str,
    sent: Sequence[Sent],
    faulty: Snapshot,
    *,
    seconds: float,
    drained: tuple[bool, str] = (True, ""),
    users: Iterable[str] | None = None,
    clean: Snapshot | None = None,
    clean_users: Iterable[str] | None = None,
) -> Row:
    """The table row of a run: every acknowledged message must be in the ledger and in
    the msg_ids of a dialogue vector; nothing may be there twice. ``clean`` is a clean
    replay of the messages of ``clean_users`` (default: all of them) to compare with."""
    acked = {s.msg_id: s for s in sent}
    user_set = set(users) if users is not None else {s.turn.user_id for s in sent}
    covered = faulty.covered()
    in_ledger = {m for m in acked if m in faulty.ledger}
    in_vectors = {m for m in acked if m in covered}
    lost = set(acked) - (in_ledger & in_vectors)
    row = Row(scenario, sent=len(acked), in_ledger=len(in_ledger), in_vectors=len(in_vectors))
    row.seconds = seconds
    row.drained = drained[0]
    if not drained[0]:
        row.notes.append(f"not drained: {drained[1]}")
    row.lost = len(lost)
    row.dead_letters = len(faulty.dead_letters)
    row.facts = sum(1 for f in faulty.facts if f.current)
    if lost:
        row.notes += _loss_notes(sent, acked, in_ledger, in_vectors)
    if faulty.dead_letters:
        errors = Counter(_error_kind(str(getattr(d, "error", ""))) for d in faulty.dead_letters)
        row.notes.append(
            "dead letters: " + "; ".join(f"{n} × {e}" for e, n in errors.most_common(3))
        )
    row.duplicates, notes = _duplicates(faulty, acked, user_set, covered)
    row.notes += notes
    if clean is not None:
        diffs = _oracle_diffs(faulty, clean, acked, clean_users)
        row.oracle_diffs = len(diffs)
        row.notes += [f"oracle: {d}" for d in diffs]
    return row


def _loss_notes(
    sent: Sequence[Sent], acked: Mapping[str, Sent], in_ledger: set[str], in_vectors: set[str]
) -> list[str]:
    """Which acknowledged messages are missing from the ledger and from every vector."""
    notes: list[str] = []
    not_ledger = set(acked) - in_ledger
    not_vec = set(acked) - in_vectors
    by_role = Counter(acked[m].turn.role for m in not_vec)
    total_role = Counter(s.turn.role for s in sent)
    if not_ledger:
        notes.append(f"lost from the ledger: {len(not_ledger)}: {sample(not_ledger)}")
    notes.append(
        f"in no dialogue vector: {len(not_vec)} "
        f"({', '.join(f'{r} {by_role[r]}/{total_role[r]}' for r in sorted(by_role))}): "
        f"{sample(not_vec)}"
    )
    return notes


def _duplicates(
    faulty: Snapshot,
    acked: Mapping[str, Sent],
    user_set: set[str],
    covered: Mapping[str, set[str]],
) -> tuple[int, list[str]]:
    """Duplicates and their notes: rows nobody acknowledged, a vector id twice, a
    message in two units, two current values of one fact."""
    extra_ledger = {m for m, e in faulty.ledger.items() if e.user_id in user_set} - set(acked)
    id_counts = Counter(v.id for v in faulty.vectors)
    repeated = {k: n for k, n in id_counts.items() if n > 1}
    two_units = {m for m, heads in covered.items() if m in acked and len(heads) > 1}
    current = Counter((f.user_id, f.key) for f in faulty.facts if f.current)
    double_current = {k: n for k, n in current.items() if n > 1}
    count = (
        len(extra_ledger)
        + sum(n - 1 for n in repeated.values())
        + len(two_units)
        + sum(n - 1 for n in double_current.values())
    )
    notes: list[str] = []
    if extra_ledger:
        notes.append(f"ledger rows never acknowledged: {len(extra_ledger)}: {sample(extra_ledger)}")
    if repeated:
        notes.append(f"vector ids stored twice: {len(repeated)}: {sample(repeated)}")
    if two_units:
        notes.append(
            f"messages in two exchange units: {len(two_units)}: "
            + "; ".join(f"{m} in {sorted(covered[m])}" for m in sorted(two_units)[:3])
        )
    if double_current:
        notes.append(f"two current values of one fact: {double_current}")
    return count, notes


def _oracle_diffs(
    faulty: Snapshot,
    clean: Snapshot,
    acked: Mapping[str, Sent],
    clean_users: Iterable[str] | None,
) -> list[str]:
    """:func:`compare` over the users the clean replay replayed (default: all)."""
    if clean_users is None:
        return compare(faulty, clean, acked)
    replayed = set(clean_users)
    return compare(
        faulty.only(replayed),
        clean,
        [m for m, s in acked.items() if s.turn.user_id in replayed],
    )


async def replay(
    sent: Sequence[Sent], deployment: Deployment, *, vector_path: Path | None = None
) -> Snapshot:
    """The oracle: the same acknowledged messages (same ids and times) remembered into a
    clean deployment and ingested by one in-process ``drain()``, with no fault."""
    mem = await deployment.open()
    try:
        for s in sorted(sent, key=lambda s: s.turn.ts_ms):
            t = s.turn
            got = await mem.remember(
                t.user_id, t.session_id, t.role, t.content, msg_id=t.caller_id, ts=t.ts
            )
            if got != s.msg_id:
                raise AssertionError(f"the replay got id {got!r} for {s.msg_id!r}")
        await mem.drain(summarize=False)
        users = {s.turn.user_id for s in sent}
        return await snapshot(mem, deployment.vector_url, users, vector_path=vector_path)
    finally:
        await mem.close()


class Checker:
    """Judges one deployment after a run: waits until its workers have drained the
    ingest stream, reads the ledger, facts, vectors and dead letters of the run's users,
    replays the acknowledged messages into a clean deployment when ``clean`` makes one,
    and returns the row of the fault table (:func:`evaluate`).
    """

    def __init__(
        self,
        mem: AsyncMemory,
        deployment: Deployment,
        *,
        clean: Callable[[], Awaitable[Deployment]] | None = None,
        clean_users: int | None = None,
    ) -> None:
        self.mem = mem
        self.deployment = deployment
        self.clean = clean
        self.clean_users = clean_users  # replay only this many users' messages (time)
        self.last: Snapshot | None = None
        self.timings: dict[str, float] = {}

    async def row(
        self,
        scenario: str,
        sent: Sequence[Sent],
        *,
        drain_timeout_s: float = 60.0,
        users: Iterable[str] | None = None,
        started: float | None = None,
    ) -> Row:
        t0 = time.monotonic()
        drained = await wait_drained(self.mem, drain_timeout_s)
        t1 = time.monotonic()
        user_list = sorted(set(users) if users is not None else {s.turn.user_id for s in sent})
        faulty = self.last = await snapshot(self.mem, self.deployment.vector_url, user_list)
        t2 = time.monotonic()
        clean = None
        replayed = user_list[: self.clean_users] if self.clean_users else user_list
        if self.clean is not None:
            mine = [s for s in sent if s.turn.user_id in set(replayed)]
            clean = await replay(mine, await self.clean())
        t3 = time.monotonic()
        begin = t0 if started is None else started
        self.timings = {
            "load and faults": t0 - begin,
            "drain": t1 - t0,
            "read": t2 - t1,
            "clean replay": t3 - t2,
        }
        row = evaluate(
            scenario, sent, faulty, seconds=t3 - begin, drained=drained, users=user_list,
            clean=clean, clean_users=replayed,
        )  # fmt: skip
        row.notes.append("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()))
        return row
