"""One memstack deployment on the harness's servers, and its worker processes.

A :class:`Deployment` is a key prefix, a database, settings and the ``MEMSTACK_*``
environment of a worker process; a :class:`WorkerProcess` is ``python -m memstack
worker`` with that environment.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memstack.core.settings import Settings, load_settings
from memstack.memory import AsyncMemory
from tests.faults.processes import ServiceError, clean_env, end_process, tail, track, untrack

# Settings of every fault deployment unless a scenario overrides them. The summariser is
# kept quiet: summaries are not what the suite checks, and a summary made during one run
# but not the other would only blur the comparison with the clean replay.
DEFAULT_SETTINGS: dict[str, object] = {
    "embedder": "hashing",
    "ingest_claim_idle_ms": 1000,
    "summary_quiet_s": 86_400,
    "auto_migrate": False,
    # Most scenarios' Redis keeps nothing on disk on purpose (what breaks is the point),
    # which the worker refuses otherwise.
    "allow_unsafe": True,
}


# The clean replay reads big batches: one consumer in order gives the same stores
# whatever the batch size, three times faster.
ORACLE_SETTINGS: dict[str, object] = {"ingest_batch": 256}


@dataclass
class Deployment:
    """One memstack deployment on the harness's servers."""

    redis_url: str
    database_url: str
    vector_url: str | None
    home: Path
    key_prefix: str = field(default_factory=lambda: f"f{uuid.uuid4().hex[:10]}")
    overrides: dict[str, object] = field(default_factory=dict)

    def values(self) -> dict[str, object]:
        return {
            **DEFAULT_SETTINGS,
            "redis_url": self.redis_url,
            "database_url": self.database_url,
            "vector_url": self.vector_url,
            "home": self.home,
            "key_prefix": self.key_prefix,
            **self.overrides,
        }

    def settings(self) -> Settings:
        return load_settings(**{k: v for k, v in self.values().items() if v is not None})

    def env(self) -> dict[str, str]:
        """The ``MEMSTACK_*`` variables of the same settings, for a child process."""
        out: dict[str, str] = {}
        for key, value in self.values().items():
            if value is None:
                continue
            if isinstance(value, bool):
                value = "true" if value else "false"
            out[f"MEMSTACK_{key.upper()}"] = str(value)
        return out

    async def open(self) -> AsyncMemory:
        return await AsyncMemory.open(self.settings())


class WorkerProcess:
    """``python -m memstack worker`` on a deployment, its output in ``log``."""

    def __init__(
        self,
        env: Mapping[str, str],
        log: Path,
        *,
        cwd: Path | None = None,
        args: Sequence[str] = ("worker",),
    ) -> None:
        self.env = {**clean_env(), "PYTHONUNBUFFERED": "1", **env}
        self.log = log
        self.cwd = cwd or log.parent
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        track(self)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> WorkerProcess:
        if self.alive():
            return self
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts + 1} at {time.time():.3f}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memstack", *self.args],
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        return self

    # What `memstack worker` prints once its store checks passed and it reads the stream.
    READY_MARK = " reading "

    def ready(self) -> bool:
        """Alive and past its start-up checks (it said it reads the stream)."""
        if not self.alive():
            return False
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return self.READY_MARK in text[text.rfind(f"--- start {self.starts} at") :]

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if not self.alive():
                raise ServiceError(f"worker exited ({self.returncode}):\n{tail(self.log)}")
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"worker printed no {self.READY_MARK.strip()!r} line in {timeout_s:.0f} s:"
                    f"\n{tail(self.log)}"
                )
            await asyncio.sleep(0.1)

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def kill9(self) -> None:
        end_process(self.proc, sig=signal.SIGKILL, timeout_s=10)

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (the worker finishes its batch), SIGKILL after ``timeout_s``."""
        return end_process(self.proc, sig=signal.SIGTERM, timeout_s=timeout_s)

    def close(self) -> None:
        self.kill9()
        untrack(self)
