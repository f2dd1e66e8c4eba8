"""Running scenarios: the servers of a run (:class:`Lab`), the servers one scenario
uses (:class:`Services`) and one scenario's deployment, workers and check
(:class:`Scenario`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.memory import AsyncMemory
from tests.faults.checker import Checker, Row
from tests.faults.deployment import ORACLE_SETTINGS, Deployment, WorkerProcess
from tests.faults.processes import Closable, reap_later, tail
from tests.faults.servers import ChromaServer, PostgresInstance, RedisInstance
from tests.faults.stores import Snapshot
from tests.faults.workload import Sent

# --- running a scenario -------------------------------------------------------------------


@dataclass
class Services:
    """The servers one scenario runs on (any of them may be shared between scenarios)."""

    redis: RedisInstance
    postgres: PostgresInstance
    chroma: ChromaServer
    root: Path  # the scenario's scratch folder (worker logs, homes)

    def deployment(self, **overrides: object) -> Deployment:
        url = self.postgres.create_database()
        home = self.root / f"home-{uuid.uuid4().hex[:6]}"
        home.mkdir(parents=True, exist_ok=True)
        return Deployment(self.redis.url, url, self.chroma.url, home, overrides=dict(overrides))

    async def adeployment(self, **overrides: object) -> Deployment:
        return await asyncio.to_thread(self.deployment, **overrides)


class Scenario:
    """One fault scenario's deployment, workers, loader and check, closed as one.

    ``async with Scenario(services, "name") as sc:`` opens a deployment and an
    ``AsyncMemory`` on it; ``sc.workers(n)`` starts worker processes; ``await
    sc.check(...)`` drains and evaluates. Workers are killed on exit, whatever happened.
    """

    def __init__(
        self,
        services: Services,
        name: str,
        *,
        oracle: bool = True,
        oracle_users: int | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        self.services = services
        self.name = name
        self.oracle = oracle
        self.oracle_users = oracle_users
        self.overrides = dict(settings or {})  # of the deployment and its clean replay
        self.started = time.monotonic()
        self.worker_procs: list[WorkerProcess] = []
        self.deployment: Deployment | None = None
        self._mem: AsyncMemory | None = None
        self.last: Snapshot | None = None  # what the last check() read
        self.timings: dict[str, float] = {}

    @property
    def mem(self) -> AsyncMemory:
        assert self._mem is not None, "use the scenario in `async with`"
        return self._mem

    @property
    def dep(self) -> Deployment:
        assert self.deployment is not None, "use the scenario in `async with`"
        return self.deployment

    async def __aenter__(self) -> Scenario:
        self.deployment = await self.services.adeployment(**self.overrides)
        self._mem = await self.deployment.open()
        self.started = time.monotonic()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self.worker_procs:
            w.close()
        if self._mem is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._mem.close(), 10)

    def worker(self, **env: str) -> WorkerProcess:
        n = len(self.worker_procs)
        w = WorkerProcess(
            {**self.dep.env(), **env},
            self.services.root / f"{self.name}-worker{n}.log",
            cwd=self.dep.home,
        )
        self.worker_procs.append(w)
        return w.start()

    async def workers(self, n: int, *, ready: bool = True) -> list[WorkerProcess]:
        started = [self.worker() for _ in range(n)]
        if ready:
            await asyncio.gather(*(w.wait_ready() for w in started))
        return started

    def checker(self) -> Checker:
        clean = None
        if self.oracle:

            async def clean_deployment() -> Deployment:
                return await self.services.adeployment(**{**self.overrides, **ORACLE_SETTINGS})

            clean = clean_deployment
        return Checker(self.mem, self.dep, clean=clean, clean_users=self.oracle_users)

    async def check(
        self,
        sent: Sequence[Sent],
        *,
        drain_timeout_s: float = 60.0,
        users: Iterable[str] | None = None,
    ) -> Row:
        """Wait for the workers to drain, then judge what the stores hold."""
        checker = self.checker()
        row = await checker.row(
            self.name, sent, drain_timeout_s=drain_timeout_s, users=users, started=self.started
        )
        self.last, self.timings = checker.last, checker.timings
        for w in self.worker_procs:
            if w.returncode not in (None, 0, -signal.SIGKILL, -signal.SIGTERM):
                row.notes.append(f"worker {w.pid} exited {w.returncode}: {tail(w.log, 3)}")
        return row


# --- servers for a run of scenarios -------------------------------------------------------


class Lab:
    """The servers of a run of scenarios: one PostgreSQL cluster and one Chroma server
    shared by the scenarios that do not break them, and the servers a scenario starts
    for itself (``own_*``), which :meth:`release` closes after it. :meth:`close` closes
    everything (and ``root``, the scratch folder of worker logs and homes, unless
    ``keep_root``)."""

    def __init__(self, root: Path, *, keep_root: bool = False) -> None:
        self.root = root
        self.keep_root = keep_root  # worker logs stay for a look after a failure
        if not keep_root:
            reap_later("dir", root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._postgres: PostgresInstance | None = None
        self._chroma: ChromaServer | None = None
        self._owned: list[Closable] = []

    def postgres(self) -> PostgresInstance:
        if self._postgres is None:
            self._postgres = self._started(PostgresInstance())
        return self._postgres

    def chroma(self) -> ChromaServer:
        if self._chroma is None:
            self._chroma = self._started(ChromaServer())
        return self._chroma

    @staticmethod
    def _started(server: Any) -> Any:
        try:
            return server.start()
        except BaseException:
            server.close()
            raise

    def own(self, server: Any) -> Any:
        """Start ``server`` and close it at the next :meth:`release`."""
        started = self._started(server)
        self._owned.append(started)
        return started

    def own_redis(self, **options: Any) -> RedisInstance:
        server: RedisInstance = self.own(RedisInstance(**options))
        return server

    def own_postgres(self) -> PostgresInstance:
        server: PostgresInstance = self.own(PostgresInstance())
        return server

    def own_chroma(self) -> ChromaServer:
        server: ChromaServer = self.own(ChromaServer())
        return server

    def services(
        self,
        *,
        redis: RedisInstance | None = None,
        postgres: PostgresInstance | None = None,
        chroma: ChromaServer | None = None,
    ) -> Services:
        """A new Redis of its own unless given; the shared PostgreSQL and Chroma."""
        root = self.root / f"run-{uuid.uuid4().hex[:6]}"
        root.mkdir(parents=True, exist_ok=True)
        return Services(
            redis or self.own_redis(), postgres or self.postgres(), chroma or self.chroma(), root
        )

    def track(self, obj: Closable) -> None:
        """Close ``obj`` at the next :meth:`release` (a worker, an embedding server)."""
        self._owned.append(obj)

    def release(self) -> None:
        owned, self._owned = self._owned, []
        for obj in reversed(owned):
            with contextlib.suppress(Exception):
                obj.close()

    def close(self) -> None:
        self.release()
        for server in (self._chroma, self._postgres):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.close()
        self._chroma = self._postgres = None
        if not self.keep_root:
            shutil.rmtree(self.root, ignore_errors=True)
