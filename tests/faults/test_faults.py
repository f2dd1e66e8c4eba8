"""The fault suite: every acknowledged message reaches every layer.

Each scenario runs memstack on servers the harness starts for it (its own Redis, a
throw-away PostgreSQL cluster, a ``chroma run``; never the shared 6379 / 5432), breaks
one of them on purpose, and then checks that every message ``remember()`` acknowledged
is in the ledger and in the ``msg_ids`` of a dialogue vector, that nothing is there
twice, that no job was dead-lettered, and (where it is cheap enough) that the stores
hold exactly what a clean replay of the same messages produces.

Run: ``MEMSTACK_REQUIRE_SERVICES=1 .venv/bin/python -m pytest tests/faults -q``
(the table of every scenario is printed at the end; ``benchmarks/faults.py`` prints the
same table outside pytest).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from tests.conftest import REQUIRE
from tests.faults.checker import Row, format_table
from tests.faults.lab import Lab
from tests.faults.processes import ServiceError
from tests.faults.scenarios import (
    scenario_chroma_outage,
    scenario_control,
    scenario_forget_mid_batch,
    scenario_postgres_outage,
    scenario_redis_flushall,
    scenario_redis_kill,
    scenario_reindex_during_ingest,
    scenario_worker_dies,
    scenario_worker_kills,
)

pytestmark = [pytest.mark.slow, pytest.mark.faults]

ROWS: list[Row] = []


@pytest.fixture(scope="module")
def lab_base(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Lab]:
    # Worker logs stay in pytest's temporary folder (kept for the last few runs).
    lab = Lab(tmp_path_factory.mktemp("faults"), keep_root=True)
    yield lab
    lab.close()
    # The table of every scenario run, past pytest's output capture.
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if ROWS and reporter is not None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line("")
            reporter.write_line("fault suite:")
            for line in format_table(ROWS).splitlines():
                reporter.write_line(line)


@pytest.fixture
def lab(lab_base: Lab) -> Iterator[Lab]:
    """The module's servers; whatever a scenario starts for itself is closed after it."""
    try:
        lab_base.postgres()
        lab_base.chroma()
    except (ServiceError, OSError) as exc:
        msg = f"the fault suite cannot start its servers: {exc}"
        if REQUIRE:
            pytest.fail(f"{msg} (MEMSTACK_REQUIRE_SERVICES is set)", pytrace=False)
        pytest.skip(msg)
    yield lab_base
    lab_base.release()


def _check(row: Row) -> None:
    ROWS.append(row)
    print(row.explain())
    assert row.ok, "\n" + row.explain()


async def test_the_harness_alone_loses_nothing(lab: Lab) -> None:
    """One worker, no fault: if this fails, the harness is wrong, not memstack."""
    _check(await scenario_control(lab, messages=300, workers=1))


async def test_workers_killed_again_and_again_lose_nothing(lab: Lab) -> None:
    _check(await scenario_worker_kills(lab, messages=3000, kills=8, interval_s=1.0))


async def test_a_dead_worker_s_jobs_are_taken_by_the_others(lab: Lab) -> None:
    _check(await scenario_worker_dies(lab, messages=400, workers=3))


async def test_redis_killed_with_aof_always_loses_nothing_acknowledged(lab: Lab) -> None:
    _check(await scenario_redis_kill(lab, messages=1500, crashes=2, fsync="always"))


async def test_workers_recover_from_flushall_and_the_window_is_rebuilt(lab: Lab) -> None:
    _check(await scenario_redis_flushall(lab, per_session=30, after=4))


async def test_postgres_down_30_s_and_chroma_down_30_s_lose_nothing(lab: Lab) -> None:
    """Two scenarios at once, each on its own deployment and its own broken server:
    most of each is waiting out its 30-second outage, so together they take the time of
    one."""
    results = await asyncio.gather(
        scenario_postgres_outage(lab, messages=600, outage_s=30),
        scenario_chroma_outage(lab, messages=600, outage_s=30),
        return_exceptions=True,
    )
    rows = [r for r in results if isinstance(r, Row)]
    for row in rows:
        ROWS.append(row)
        print(row.explain())
    for r in results:
        if isinstance(r, BaseException):
            raise r
    assert all(r.ok for r in rows), "\n" + "\n\n".join(r.explain() for r in rows if not r.ok)


async def test_forget_during_a_slow_batch_is_final(lab: Lab) -> None:
    _check(await scenario_forget_mid_batch(lab, messages=80, delay_s=2.0, after_s=5.0))


async def test_reindex_during_ingest_dead_letters_nothing(lab: Lab) -> None:
    _check(await scenario_reindex_during_ingest(lab, messages=1000))


def test_the_table_lines_up() -> None:
    row = Row("x", sent=3, in_ledger=3, in_vectors=2, lost=1, seconds=1.5)
    table = format_table([row])
    assert table.splitlines()[0].startswith("| scenario | sent | in ledger | in vectors")
    assert "| x        | 3    | 3         | 2          |" in table
    assert not row.ok and "| 1.5 " in table
