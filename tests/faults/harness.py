"""Fault-injection harness: memstack's real services, started here, broken on purpose.

Every server this module starts is its own: a ``redis-server``, a throw-away PostgreSQL
cluster (``initdb`` + ``pg_ctl``) and a ``chroma run``, each on a free port with its data
in a temporary folder, so the shared Redis (6379) and PostgreSQL (5432) of the machine
are never touched. A process is only ever stopped by the PID this module started, and
every instance is also closed at interpreter exit if its owner forgot.

The pieces:

- :class:`RedisInstance`, :class:`PostgresInstance`, :class:`ChromaServer`: start, stop,
  ``kill9`` and start again on the same port and data (Redis reloads its AOF).
- :class:`Deployment`: one memstack deployment on those services (a key prefix, a
  database, settings and the ``MEMSTACK_*`` environment of a worker process).
- :class:`WorkerProcess`: ``python -m memstack worker`` with that environment.
- :func:`plan_workload` and :class:`Loader`: a conversation workload sent through
  ``AsyncMemory.remember`` with a caller id per message, retried until acknowledged.
- :class:`Checker`: once the workers have drained, what reached the ledger, the vectors
  and the facts, against a clean replay of the same acknowledged messages
  (:func:`replay`), as one :class:`Row` of the fault table.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import psycopg
import redis
from redis.exceptions import RedisError
from sqlalchemy import select

from memstack import db
from memstack.errors import MemstackError, StoreUnavailable
from memstack.memory import AsyncMemory
from memstack.models import FactRow, MessageRow
from memstack.settings import Settings, load_settings

# --- processes ---------------------------------------------------------------------------


class ServiceError(RuntimeError):
    """A server of the harness did not start or stop as asked."""


class _Closable(Protocol):
    def close(self) -> None: ...


# Instances still open: closed at interpreter exit, so no server outlives a crashed run.
_LIVE: dict[int, _Closable] = {}


def _track(obj: _Closable) -> None:
    _LIVE[id(obj)] = obj


def _untrack(obj: _Closable) -> None:
    _LIVE.pop(id(obj), None)


@atexit.register
def _close_leftovers() -> None:
    for obj in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            obj.close()


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, for error messages."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end(proc: subprocess.Popen[bytes] | None, *, sig: int, timeout_s: float) -> int | None:
    """Send ``sig`` to this one process, wait, SIGKILL it if it is still there."""
    if proc is None:
        return None
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
    return proc.returncode


# --- the reaper: nothing outlives a harness process that was killed -----------------------
#
# Finalizers and atexit do not run when the process using the harness is SIGKILLed or
# SIGTERMed (``timeout``, a CI cancel). Every process the harness starts carries this
# process's token in its environment; a small reaper process, started with the first
# server, waits for this process to end, then stops the PostgreSQL clusters still
# registered, SIGKILLs the processes carrying the token or working in a registered
# folder (and only those: a PID is never trusted alone) and removes the folders.

TOKEN_VAR = "FAULTS_HARNESS_TOKEN"
_TOKEN = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
_reaper: subprocess.Popen[bytes] | None = None
_reaper_state: Path | None = None

_REAPER_SCRIPT = r"""
import json, os, shutil, signal, subprocess, sys, time
parent, token, state = int(sys.argv[1]), sys.argv[2], sys.argv[3]
while os.getppid() == parent:
    time.sleep(0.5)
jobs = []
try:
    with open(os.path.join(state, "jobs")) as fh:
        jobs = [json.loads(line) for line in fh if line.strip()]
except OSError:
    pass
for job in jobs:
    if job["kind"] == "pgdata" and os.path.isdir(job["path"]):
        cmd = [job["pg_ctl"], "-D", job["path"], "-m", "immediate", "-w", "-t", "20", "stop"]
        if job.get("user"):
            cmd = ["runuser", "-u", job["user"], "--", *cmd]
        subprocess.run(cmd, capture_output=True, timeout=60, check=False)
me = os.getpid()
wanted = ("FAULTS_HARNESS_TOKEN=" + token).encode()
# Redis rewrites its process title over its environment: it is known by its working
# directory, the folder the harness made for it.
by_cwd = [(os.path.realpath(j["path"]) + os.sep, j["cwd_of"].encode()) for j in jobs
          if j.get("cwd_of")]
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == me:
        continue
    try:
        with open(f"/proc/{name}/environ", "rb") as fh:
            mine = wanted in fh.read().split(b"\0")
        if not mine and by_cwd:
            cwd = os.path.realpath(f"/proc/{name}/cwd") + os.sep
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read()
            mine = any(cwd.startswith(root) and prog in cmd for root, prog in by_cwd)
        if mine:
            os.kill(int(name), signal.SIGKILL)
    except OSError:
        pass
time.sleep(0.5)
for job in jobs:
    if job["kind"] in ("dir", "pgdata"):
        shutil.rmtree(job.get("root", job["path"]), ignore_errors=True)
shutil.rmtree(state, ignore_errors=True)
"""


def _ensure_reaper() -> Path:
    global _reaper, _reaper_state
    if _reaper is None or _reaper.poll() is not None or _reaper_state is None:
        _reaper_state = Path(tempfile.mkdtemp(prefix="memstack-faults-reaper-"))
        env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
        _reaper = subprocess.Popen(
            [sys.executable, "-c", _REAPER_SCRIPT, str(os.getpid()), _TOKEN, str(_reaper_state)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C to this process group spares it
        )
    return _reaper_state


def _reap_later(kind: str, path: Path, **extra: str) -> None:
    """Have the reaper remove ``path`` (and stop the cluster of a ``pgdata`` folder) if
    this process dies without closing it."""
    state = _ensure_reaper()
    with (state / "jobs").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"kind": kind, "path": str(path), **extra}) + "\n")


def _child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with the token the reaper looks for."""
    _ensure_reaper()
    return {**(os.environ if base is None else base), TOKEN_VAR: _TOKEN}


def _clean_env() -> dict[str, str]:
    """This process's environment without any ``MEMSTACK_*`` setting (a child gets only
    the settings its deployment names), with the folder of the ``memstack`` package
    this process imported first on ``PYTHONPATH`` (a worker runs the same code as the
    test that started it, whatever its working directory) and the reaper's token."""
    import memstack

    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    root = str(Path(memstack.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return _child_env(env)


# --- Redis -------------------------------------------------------------------------------


class RedisInstance:
    """``redis-server`` on a free port with a data folder of its own.

    ``start()`` after ``kill9()`` or ``stop()`` runs it again on the same port and
    folder, so an AOF is reloaded; ``close()`` kills it and removes the folder.
    """

    def __init__(
        self,
        *,
        appendonly: bool = False,
        appendfsync: Literal["always", "everysec", "no"] = "everysec",
        port: int | None = None,
        binary: str | None = None,
    ) -> None:
        found = binary or shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(found).exists():
            raise ServiceError("redis-server is not installed")
        self.binary = found
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="memstack-faults-redis-"))
        self.log = self.dir / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None
        _track(self)
        _reap_later("dir", self.dir, cwd_of="redis-server")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def args(self) -> list[str]:
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.log),
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.appendfsync,
        ]

    def start(self, timeout_s: float = 30.0) -> RedisInstance:
        if self.pid is not None:
            return self
        self.proc = subprocess.Popen(
            self.args(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.dir,
            env=_child_env(),
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=2)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    if client.ping():  # LOADING (an AOF being read) raises until done
                        return self
                except RedisError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise ServiceError(
                        f"redis-server on {self.port} did not come up "
                        f"(exit {self.proc.returncode}):\n{tail(self.log)}"
                    )
                time.sleep(0.05)
        finally:
            client.close()

    def kill9(self) -> None:
        """SIGKILL: whatever the server has not written to its AOF is gone."""
        _end(self.proc, sig=signal.SIGKILL, timeout_s=10)

    def stop(self) -> None:
        _end(self.proc, sig=signal.SIGTERM, timeout_s=10)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_connect_timeout=2, socket_timeout=5)

    def flushall(self) -> None:
        c = self.client()
        try:
            c.flushall()
        finally:
            c.close()

    def close(self) -> None:
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)
        _untrack(self)

    def __enter__(self) -> RedisInstance:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- PostgreSQL --------------------------------------------------------------------------


def _pg_bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise ServiceError("PostgreSQL's initdb is not installed (/usr/lib/postgresql/*/bin)")


class PostgresInstance:
    """A throw-away PostgreSQL cluster: ``initdb`` into a temporary folder, trust auth,
    its socket in that folder, on a free loopback port.

    PostgreSQL refuses to run as root, so when this process is root the cluster belongs
    to the ``postgres`` OS user and every command runs through ``runuser``. ``stop()``
    is an immediate shutdown (a crash, as far as clients can tell); ``start()`` brings
    the same cluster back on the same port.
    """

    def __init__(self, *, port: int | None = None, os_user: str = "postgres") -> None:
        self.bindir = _pg_bindir()
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="memstack-faults-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.os_user = os_user if os.geteuid() == 0 else None
        if self.os_user is not None:
            shutil.chown(self.dir, user=self.os_user)
            os.chmod(self.dir, 0o700)
        self._initialised = False
        _track(self)
        user = {"user": self.os_user} if self.os_user else {}
        pg_ctl = str(self.bindir / "pg_ctl")
        _reap_later("pgdata", self.data, root=str(self.dir), pg_ctl=pg_ctl, **user)

    def _run(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.os_user is not None:
            cmd = ["runuser", "-u", self.os_user, "--", *cmd]
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=self.dir,
            check=False,
            env=_child_env(),  # the postmaster inherits the reaper's token
        )

    def admin_url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    url = admin_url

    @property
    def pid(self) -> int | None:
        """The postmaster's PID, from its pid file, if it runs."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _pid_alive(pid) else None

    def start(self) -> PostgresInstance:
        if not self._initialised:
            res = self._run(
                "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                "-E", "UTF8", "--no-sync",
            )  # fmt: skip
            if res.returncode != 0:
                raise ServiceError(f"initdb failed:\n{res.stdout}\n{res.stderr}")
            self._initialised = True
        # fsync=off: only an OS crash could lose data, and none is simulated. Commits stay
        # synchronous, so an immediate shutdown loses nothing a client saw committed.
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        res = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
            "-o", options, "start",
        )  # fmt: skip
        if res.returncode != 0:
            raise ServiceError(
                f"pg_ctl start failed:\n{res.stdout}\n{res.stderr}\n{tail(self.log)}"
            )
        return self

    def stop(self) -> None:
        """Immediate shutdown: clients lose their connections mid-transaction."""
        if self.pid is None:
            return
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")
        pid = self.pid
        if pid is not None:  # pg_ctl failed: end the postmaster by its own PID
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def create_database(self, name: str | None = None, *, migrate: bool = True) -> str:
        """A new database (migrated to head); returns its URL."""
        name = name or f"memstack_faults_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin_url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = self.admin_url(name)
        if migrate:
            db.upgrade(load_settings(database_url=url))
        return url

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        _untrack(self)

    def __enter__(self) -> PostgresInstance:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- Chroma ------------------------------------------------------------------------------


def _chroma_cli() -> str:
    # Beside this interpreter first: `.venv/bin/python -m pytest` need not have it on PATH.
    found = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    if found is None:
        raise ServiceError("the chroma CLI (shipped by chromadb) is not installed")
    return found


class ChromaServer:
    """``chroma run`` on a free port with its own data folder; ``stop()`` then
    ``start()`` serves the same data on the same port again."""

    def __init__(self, *, port: int | None = None) -> None:
        self.cli = _chroma_cli()
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="memstack-faults-chroma-"))
        self.path = self.dir / "data"
        self.log = self.dir / "chroma.log"
        self.proc: subprocess.Popen[bytes] | None = None
        _track(self)
        _reap_later("dir", self.dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self, timeout_s: float = 60.0) -> ChromaServer:
        if self.pid is not None:
            return self
        args = [self.cli, "run", "--path", str(self.path), "--host", "127.0.0.1"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*args, "--port", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                cwd=self.dir, env=_clean_env(),
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"chroma run did not come up:\n{tail(self.log)}")
            time.sleep(0.1)

    def stop(self) -> None:
        _end(self.proc, sig=signal.SIGTERM, timeout_s=15)

    def kill9(self) -> None:
        _end(self.proc, sig=signal.SIGKILL, timeout_s=10)

    def close(self) -> None:
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)
        _untrack(self)

    def __enter__(self) -> ChromaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- a deployment and its workers ---------------------------------------------------------

# Settings of every fault deployment unless a scenario overrides them. The summariser is
# kept quiet: summaries are not what the suite checks, and a summary made during one run
# but not the other would only blur the comparison with the clean replay.
DEFAULT_SETTINGS: dict[str, object] = {
    "embedder": "hashing",
    "ingest_claim_idle_ms": 1000,
    "summary_quiet_s": 86_400,
    "auto_migrate": False,
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
        self.env = {**_clean_env(), "PYTHONUNBUFFERED": "1", **env}
        self.log = log
        self.cwd = cwd or log.parent
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        _track(self)

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

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until the worker says it reads the stream (its store checks passed)."""
        deadline = time.monotonic() + timeout_s
        marker = f"--- start {self.starts} at"
        while time.monotonic() < deadline:
            text = self.log.read_text(encoding="utf-8", errors="replace")
            if " reading " in text[text.rfind(marker) :]:
                return
            if not self.alive():
                raise ServiceError(f"worker exited ({self.returncode}):\n{tail(self.log)}")
            await asyncio.sleep(0.1)
        raise ServiceError(f"worker not ready after {timeout_s:.0f} s:\n{tail(self.log)}")

    def ready(self) -> bool:
        """Alive and past its start-up checks (it said it reads the stream)."""
        if not self.alive():
            return False
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return " reading " in text[text.rfind(f"--- start {self.starts} at") :]

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def kill9(self) -> None:
        _end(self.proc, sig=signal.SIGKILL, timeout_s=10)

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (the worker finishes its batch), SIGKILL after ``timeout_s``."""
        return _end(self.proc, sig=signal.SIGTERM, timeout_s=timeout_s)

    def close(self) -> None:
        self.kill9()
        _untrack(self)


class SlowEmbeddings:
    """An OpenAI-compatible ``/v1/embeddings`` server on a free port that answers every
    call after ``delay_s``: a worker using it spends that long mid-batch. Vectors are
    derived from each text's hash (``dim`` floats), so equal texts embed alike."""

    def __init__(self, delay_s: float = 2.0, dim: int = 16) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.delay_s = delay_s
        self.dim = dim
        self.lock = threading.Lock()
        self.in_flight = 0
        self.calls = 0
        self.inputs: list[list[str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with owner.lock:
                    owner.in_flight += 1
                    owner.calls += 1
                    owner.inputs.append([str(t) for t in texts])
                try:
                    time.sleep(owner.delay_s)
                    data = [
                        {"object": "embedding", "index": i, "embedding": owner.vector(str(t))}
                        for i, t in enumerate(texts)
                    ]
                    payload = json.dumps(
                        {"object": "list", "data": data, "model": "slow", "usage": {}}
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                finally:
                    with owner.lock:
                        owner.in_flight -= 1

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        _track(self)

    def vector(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        raw = [b / 255.0 - 0.5 for b in digest[: self.dim]]
        norm = sum(x * x for x in raw) ** 0.5 or 1.0
        return [x / norm for x in raw]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    async def idle(self, timeout_s: float = 60.0) -> None:
        """Until no call is in flight."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < deadline:  # noqa: ASYNC110 (another thread)
            await asyncio.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        _untrack(self)


# --- the workload ------------------------------------------------------------------------

CITIES = (
    "Lisbon", "Porto", "Madrid", "Seville", "Paris", "Lyon", "Berlin", "Munich", "Vienna",
    "Prague", "Warsaw", "Krakow", "Oslo", "Bergen", "Stockholm", "Helsinki", "Dublin",
    "Edinburgh", "Glasgow", "Toronto", "Montreal", "Boston", "Chicago", "Denver", "Seattle",
    "Austin", "Kyoto", "Osaka", "Sapporo", "Busan",
)  # fmt: skip
TOPICS_EN = (
    "a laptop for programming", "a quiet hotel near the station", "a gift for my sister",
    "running shoes", "a weekend trip", "a used bicycle", "a coffee grinder", "a desk chair",
    "noise-cancelling headphones", "a tent for two",
)  # fmt: skip
TOPICS_ZH = ("轻薄本", "机械键盘", "旅行箱", "咖啡机", "显示器", "登山鞋", "蓝牙音箱", "台灯")
QUESTIONS = (
    "What would you suggest for {topic}?",
    "Can you compare two options for {topic}?",
    "帮我看看{zh}有什么推荐？",
    "Is there anything I should avoid when buying {topic}?",
    "{zh}哪个牌子比较耐用？",
)
REPLIES = (
    ("assistant", "Here are three options for {topic}, sorted by price."),
    ("tool", '{{"results": 3, "query": "{topic}", "source": "catalogue"}}'),
    ("assistant", "好的，我整理了几款{zh}，价格从低到高。"),
    ("tool", '{{"stock": "ok", "item": "{zh}"}}'),
    ("assistant", "The second one fits best; it is lighter and cheaper."),
)


@dataclass(frozen=True)
class Turn:
    """One planned message. ``caller_id`` is the idempotency key ``remember`` gets."""

    user_id: str
    session_id: str
    role: str
    content: str
    caller_id: str
    ts_ms: int
    fact: str | None = None  # the fact the rules should extract, e.g. "budget_limit"

    @property
    def ts(self) -> datetime:
        # Half a millisecond in: the float arithmetic of to_ms() cannot round it down.
        return datetime.fromtimestamp(self.ts_ms / 1000 + 0.0005, tz=UTC)


@dataclass
class Workload:
    sessions: list[list[Turn]]
    tag: str

    @property
    def turns(self) -> list[Turn]:
        return sorted((t for s in self.sessions for t in s), key=lambda t: t.ts_ms)

    @property
    def users(self) -> list[str]:
        return sorted({s[0].user_id for s in self.sessions if s})

    def __len__(self) -> int:
        return sum(len(s) for s in self.sessions)


def plan_workload(
    messages: int,
    *,
    users: int = 6,
    sessions_per_user: int = 3,
    tag: str | None = None,
    seed: int = 15,
    fact_share: float = 0.35,
    start_ms: int | None = None,
    step_ms: int = 10,
) -> Workload:
    """``messages`` messages over ``users × sessions_per_user`` sessions.

    Turns alternate user / reply; every third session answers with two or three
    consecutive assistant and tool replies. About ``fact_share`` of the user turns state
    a fact the offline rules extract (a budget, a city), each with a value the user
    never stated before, so which value is current depends only on the messages' times,
    never on the order a worker processes them. Half the users state budgets in English
    dollars ("My budget is at most $N"), the others in Chinese ("我预算不超过N千"), never
    both: the rules read "N千" in the currency of the budget current when the message is
    processed, which would make the stored currency depend on that order. Times are
    distinct across the whole workload, ``step_ms`` apart, ending now.
    """
    rng = random.Random(seed)
    tag = tag or uuid.uuid4().hex[:6]
    n_sessions = users * sessions_per_user
    sizes = [
        messages // n_sessions + (1 if i < messages % n_sessions else 0) for i in range(n_sessions)
    ]
    counters: dict[str, int] = defaultdict(int)
    keyed: list[tuple[str, str, list[tuple[str, str, str | None]]]] = []
    for i, size in enumerate(sizes):
        user = f"{tag}u{i // sessions_per_user}"
        session = f"{tag}u{i // sessions_per_user}s{i % sessions_per_user}"
        multi = i % 3 == 0
        english = (i // sessions_per_user) % 2 == 0
        turns: list[tuple[str, str, str | None]] = []
        while len(turns) < size:
            topic, zh = rng.choice(TOPICS_EN), rng.choice(TOPICS_ZH)
            n = counters[user]
            counters[user] += 1
            fact: str | None = None
            if rng.random() < fact_share:
                if n % 2 == 0 and english:
                    content, fact = (
                        f"My budget is at most ${1003 + 10 * n} for {topic}.",
                        "budget_limit",
                    )
                elif n % 2 == 0:
                    content, fact = f"我预算不超过{n + 2}千，想看看{zh}。", "budget_limit"
                elif n // 2 < len(CITIES):
                    content, fact = f"I live in {CITIES[n // 2]}.", "city"
                else:
                    content = f"Tell me more about {topic}, please (note {n})."
            else:
                content = rng.choice(QUESTIONS).format(topic=topic, zh=zh) + f" (#{n})"
            turns.append(("user", content, fact))
            replies = rng.randint(2, 3) if multi else 1
            for r in range(replies):
                if len(turns) >= size:
                    break
                # Single replies are assistant turns; a multi-reply answer is assistant,
                # tool, assistant (or the Chinese variants).
                role, text = REPLIES[r + 2 * (n % 2) if multi else 2 * (n % 3)]
                turns.append((role, text.format(topic=topic, zh=zh) + f" [{n}.{r}]", None))
        keyed.append((user, session, turns))
    start = start_ms if start_ms is not None else int(time.time() * 1000) - messages * step_ms
    out: list[list[Turn]] = [[] for _ in keyed]
    clock = 0
    for pos in range(max(sizes, default=0)):  # round robin: times interleave across sessions
        for idx, (user, session, turns) in enumerate(keyed):
            if pos < len(turns):
                role, content, fact = turns[pos]
                out[idx].append(
                    Turn(user, session, role, content, f"m{pos}", start + clock * step_ms, fact)
                )
                clock += 1
    return Workload(out, tag)


# --- sending -----------------------------------------------------------------------------

RETRYABLE: tuple[type[BaseException], ...] = (StoreUnavailable, RedisError, OSError, TimeoutError)


@dataclass(frozen=True)
class Sent:
    """An acknowledged message: ``remember`` returned ``msg_id``."""

    turn: Turn
    msg_id: str
    attempts: int
    latency_s: float  # of the call that succeeded
    acked_at: float  # time.monotonic()


class Loader:
    """Sends a workload through ``AsyncMemory.remember``, one task per session (each
    session in order), optionally paced to ``rate`` messages per second overall.

    With ``retry`` a call failing with a store error is repeated with the same caller
    id and time until it succeeds or ``retry_timeout_s`` passes: the id makes the retry
    idempotent. Without it, a failed call is recorded in ``failed`` and not repeated.
    """

    def __init__(
        self,
        mem: AsyncMemory,
        *,
        retry: bool = True,
        retry_timeout_s: float = 180.0,
        rate: float | None = None,
    ) -> None:
        self.mem = mem
        self.retry = retry
        self.retry_timeout_s = retry_timeout_s
        self.rate = rate
        self.acked: list[Sent] = []
        self.failed: list[tuple[Turn, str]] = []  # gave up: never acknowledged
        self.refused: list[tuple[Turn, str]] = []  # a non-retryable error
        self.retries = 0
        self.failed_calls = 0  # every failed attempt, retried or not
        self._slot = 0
        self._t0: float | None = None

    @property
    def done(self) -> int:
        return len(self.acked) + len(self.failed) + len(self.refused)

    async def _pace(self) -> None:
        if not self.rate:
            return
        if self._t0 is None:
            self._t0 = time.monotonic()
        slot, self._slot = self._slot, self._slot + 1
        delay = self._t0 + slot / self.rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def send(self, turn: Turn) -> Sent | None:
        deadline = time.monotonic() + self.retry_timeout_s
        attempts = 0
        while True:
            attempts += 1
            start = time.perf_counter()
            try:
                msg_id = await self.mem.remember(
                    turn.user_id,
                    turn.session_id,
                    turn.role,
                    turn.content,
                    msg_id=turn.caller_id,
                    ts=turn.ts,
                )
            except RETRYABLE as exc:
                self.failed_calls += 1
                if not self.retry or time.monotonic() > deadline:
                    self.failed.append((turn, f"{type(exc).__name__}: {exc}"))
                    return None
                self.retries += 1
                await asyncio.sleep(min(0.05 * 2 ** min(attempts, 5), 1.0))
                continue
            except MemstackError as exc:
                self.refused.append((turn, f"{type(exc).__name__}: {exc}"))
                return None
            sent = Sent(turn, msg_id, attempts, time.perf_counter() - start, time.monotonic())
            self.acked.append(sent)
            return sent

    async def _session(self, turns: Sequence[Turn], stop: asyncio.Event | None) -> None:
        for turn in turns:
            if stop is not None and stop.is_set():
                return
            await self._pace()
            await self.send(turn)

    async def run(
        self, workload: Workload | Sequence[Sequence[Turn]], *, stop: asyncio.Event | None = None
    ) -> None:
        sessions = workload.sessions if isinstance(workload, Workload) else workload
        await asyncio.gather(*(self._session(s, stop) for s in sessions))

    def latencies_ms(self) -> tuple[float, float]:
        """p50 and p99 of the acknowledged calls, in milliseconds."""
        return percentiles([s.latency_s * 1000 for s in self.acked])


def percentiles(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return (float("nan"), float("nan"))
    if len(values) == 1:
        return (values[0], values[0])
    qs = statistics.quantiles(values, n=100, method="inclusive")
    return (qs[49], qs[98])


# --- reading what the stores hold ---------------------------------------------------------


@dataclass(frozen=True)
class LedgerEntry:
    msg_id: str
    user_id: str
    session_id: str
    role: str
    content: str
    created_ms: int
    name: str | None


@dataclass(frozen=True)
class FactEntry:
    user_id: str
    key: str
    value: str  # canonical JSON
    msg_id: str
    current: bool


@dataclass(frozen=True)
class VectorEntry:
    collection: str
    id: str
    document: str
    metadata: Mapping[str, Any]

    @property
    def layer(self) -> str:
        return str(self.metadata.get("source_layer", ""))

    @property
    def msg_ids(self) -> tuple[str, ...]:
        raw = self.metadata.get("msg_ids")
        if isinstance(raw, str):
            return tuple(x for x in raw.split(",") if x)
        if isinstance(raw, list | tuple):
            return tuple(str(x) for x in raw)
        head = self.metadata.get("msg_id")
        return (str(head),) if head else ()

    @property
    def head(self) -> str:
        return str(self.metadata.get("msg_id") or self.id.rsplit("#", 1)[0])


def chroma_client(vector_url: str | None, path: Path | None = None) -> Any:
    """A raw chromadb client on a server URL or an embedded folder."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    settings = ChromaSettings(anonymized_telemetry=False)
    if vector_url:
        parts = urlsplit(vector_url)
        return chromadb.HttpClient(
            host=parts.hostname or "127.0.0.1", port=parts.port or 8000, settings=settings
        )
    if path is None:
        raise ValueError("a vector_url or a path is needed")
    return chromadb.PersistentClient(path=str(path), settings=settings)


def read_vectors_sync(client: Any, prefix: str, page: int = 2000) -> list[VectorEntry]:
    """Every vector of every collection whose name starts with ``prefix``."""
    out: list[VectorEntry] = []
    names = sorted(c.name for c in client.list_collections() if c.name.startswith(prefix))
    for name in names:
        collection = client.get_collection(name, embedding_function=None)
        offset = 0
        while True:
            got = collection.get(include=["metadatas", "documents"], limit=page, offset=offset)
            ids = got["ids"]
            for i, vid in enumerate(ids):
                meta = (got["metadatas"] or [None] * len(ids))[i] or {}
                doc = (got["documents"] or [None] * len(ids))[i] or ""
                out.append(VectorEntry(name, vid, doc, dict(meta)))
            if len(ids) < page:
                break
            offset += page
    return out


async def read_vectors(
    vector_url: str | None, prefix: str, path: Path | None = None
) -> list[VectorEntry]:
    def work() -> list[VectorEntry]:
        return read_vectors_sync(chroma_client(vector_url, path), prefix)

    return await asyncio.to_thread(work)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@dataclass
class Snapshot:
    """What one deployment holds about a set of users (or all of them)."""

    ledger: dict[str, LedgerEntry]
    facts: list[FactEntry]
    vectors: list[VectorEntry]
    dead_letters: list[Any]

    @property
    def dialogue(self) -> list[VectorEntry]:
        return [v for v in self.vectors if v.layer == "dialogue"]

    def covered(self) -> dict[str, set[str]]:
        """Message id → heads (unit ids) of the dialogue vectors whose msg_ids name it."""
        out: dict[str, set[str]] = defaultdict(set)
        for v in self.dialogue:
            for m in v.msg_ids:
                out[m].add(v.head)
        return out


async def snapshot(
    mem: AsyncMemory, vector_url: str | None, users: Iterable[str] | None = None, *,
    vector_path: Path | None = None,
) -> Snapshot:  # fmt: skip
    """Ledger rows, facts, vectors and dead letters of ``mem``'s deployment; ledger and
    facts of ``users`` only when given (vectors: every collection of the key prefix)."""
    wanted = sorted(set(users)) if users is not None else None
    async with mem.sessions() as s:
        q = select(MessageRow)
        f = select(FactRow)
        if wanted is not None:
            q = q.where(MessageRow.user_id.in_(wanted))
            f = f.where(FactRow.user_id.in_(wanted))
        rows = list(await s.scalars(q))
        fact_rows = list(await s.scalars(f))
    ledger_entries = {
        r.msg_id: LedgerEntry(
            r.msg_id,
            r.user_id,
            r.session_id,
            r.role,
            r.content,
            int(r.created_at.timestamp() * 1000),
            r.name,
        )
        for r in rows
    }
    facts = [
        FactEntry(r.user_id, r.fact_key, _json(r.fact_value), r.msg_id, r.valid_until is None)
        for r in fact_rows
    ]
    vectors = await read_vectors(vector_url, mem.settings.key_prefix, vector_path)
    if wanted is not None:
        keep = set(wanted)
        vectors = [v for v in vectors if v.metadata.get("user_id") in keep]
    dead = await mem.dead_letters(100_000)
    return Snapshot(ledger_entries, facts, vectors, dead)


async def wait_drained(
    mem: AsyncMemory, timeout_s: float, *, poll_s: float = 0.25
) -> tuple[bool, str]:
    """Until the ingest stream holds nothing pending (``queue.pending_count() == 0``)
    twice in a row, or ``timeout_s``. Returns (drained, the last error or count seen).

    ``pending_count()`` creates the consumer group when its ``AsyncMemory`` has not
    seen it yet, which would repair a lost group on the workers' behalf: call it once
    before any fault (:func:`prime`) so this object never creates it again.
    """
    deadline = time.monotonic() + timeout_s
    last = ""
    zeros = 0
    while True:
        try:
            pending = await mem.queue.pending_count()
            last = f"{pending} pending"
            zeros = zeros + 1 if pending == 0 else 0
            if zeros >= 2:
                return True, last
        except MemstackError as exc:
            last = f"{type(exc).__name__}: {exc}"[:300]
            zeros = 0
        if time.monotonic() > deadline:
            return False, last
        await asyncio.sleep(poll_s)


async def prime(mem: AsyncMemory) -> None:
    """Make ``mem`` know the consumer group (see :func:`wait_drained`)."""
    await mem.queue.pending_count()


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
    cells = [list(COLUMNS), *(r.cells() for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(c) for c in cells[1:])])


_UUIDISH = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{4,}|\b[0-9a-f]{10,}\b")


def _error_kind(error: str) -> str:
    """A dead letter's error without the ids that make every one of them unique."""
    return _UUIDISH.sub("…", error)[:160]


def _sample(items: Iterable[str], n: int = 5) -> str:
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

    fc = Counter((f.user_id, f.key, f.value, f.msg_id, f.current) for f in faulty.facts)
    cc = Counter((f.user_id, f.key, f.value, f.msg_id, f.current) for f in clean.facts)
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
) -> Row:
    """The table row of a run: every acknowledged message must be in the ledger and in
    the msg_ids of a dialogue vector; nothing may be there twice."""
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
        not_ledger = set(acked) - in_ledger
        not_vec = set(acked) - in_vectors
        by_role = Counter(acked[m].turn.role for m in not_vec)
        total_role = Counter(s.turn.role for s in sent)
        if not_ledger:
            row.notes.append(f"lost from the ledger: {len(not_ledger)}: {_sample(not_ledger)}")
        row.notes.append(
            f"in no dialogue vector: {len(not_vec)} "
            f"({', '.join(f'{r} {by_role[r]}/{total_role[r]}' for r in sorted(by_role))}): "
            f"{_sample(not_vec)}"
        )
    if faulty.dead_letters:
        errors = Counter(_error_kind(str(getattr(d, "error", ""))) for d in faulty.dead_letters)
        row.notes.append(
            "dead letters: " + "; ".join(f"{n} × {e}" for e, n in errors.most_common(3))
        )

    # Duplicates: rows nobody acknowledged, a vector id twice, a message in two units,
    # two current values of one fact.
    extra_ledger = {m for m, e in faulty.ledger.items() if e.user_id in user_set} - set(acked)
    id_counts = Counter(v.id for v in faulty.vectors)
    repeated = {k: n for k, n in id_counts.items() if n > 1}
    two_units = {m for m, heads in covered.items() if m in acked and len(heads) > 1}
    current = Counter((f.user_id, f.key) for f in faulty.facts if f.current)
    double_current = {k: n for k, n in current.items() if n > 1}
    row.duplicates = (
        len(extra_ledger)
        + sum(n - 1 for n in repeated.values())
        + len(two_units)
        + sum(n - 1 for n in double_current.values())
    )
    if extra_ledger:
        row.notes.append(
            f"ledger rows never acknowledged: {len(extra_ledger)}: {_sample(extra_ledger)}"
        )
    if repeated:
        row.notes.append(f"vector ids stored twice: {len(repeated)}: {_sample(repeated)}")
    if two_units:
        sample = sorted(two_units)[:3]
        row.notes.append(
            f"messages in two exchange units: {len(two_units)}: "
            + "; ".join(f"{m} in {sorted(covered[m])}" for m in sample)
        )
    if double_current:
        row.notes.append(f"two current values of one fact: {double_current}")

    if clean is not None:
        diffs = compare(faulty, clean, acked)
        row.oracle_diffs = len(diffs)
        row.notes += [f"oracle: {d}" for d in diffs]
    return row


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

    ``mem`` must have seen the consumer group before any fault (:func:`prime`).
    """

    def __init__(
        self,
        mem: AsyncMemory,
        deployment: Deployment,
        *,
        clean: Callable[[], Awaitable[Deployment]] | None = None,
    ) -> None:
        self.mem = mem
        self.deployment = deployment
        self.clean = clean
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
        clean = await replay(sent, await self.clean()) if self.clean is not None else None
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
            clean=clean,
        )  # fmt: skip
        row.notes.append("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()))
        return row


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
        **overrides: object,
    ) -> None:
        self.services = services
        self.name = name
        self.oracle = oracle
        self.overrides = overrides
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
        await prime(self._mem)
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
        return Checker(self.mem, self.dep, clean=clean)

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


async def kill_workers_repeatedly(
    workers: Sequence[WorkerProcess],
    *,
    kills: int,
    interval_s: float,
    until: Callable[[], bool] | None = None,
) -> int:
    """Every ``interval_s``: SIGKILL one worker (in turn) and start it again. Returns
    how many kills were made (fewer when ``until()`` turns true first)."""
    done = 0
    turn = 0
    while done < kills:
        await asyncio.sleep(interval_s)
        if until is not None and until():
            break
        # In turn, but only a worker that got past its start: killing one still
        # importing tests nothing.
        ready = [w for w in workers if w.ready()]
        if not ready:
            continue
        order = [workers[(turn + k) % len(workers)] for k in range(len(workers))]
        w = next(x for x in order if x in ready)
        turn = workers.index(w) + 1
        w.kill9()
        w.start()
        done += 1
    return done


async def gather_with(main: Awaitable[None], *side: Awaitable[Any]) -> None:
    """Run ``main`` with side tasks; side tasks are cancelled if ``main`` fails."""
    tasks = [asyncio.ensure_future(s) for s in side]
    try:
        await main
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


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
            _reap_later("dir", root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._postgres: PostgresInstance | None = None
        self._chroma: ChromaServer | None = None
        self._owned: list[_Closable] = []

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

    def track(self, obj: _Closable) -> None:
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


# --- the scenarios of issue 15 ------------------------------------------------------------


def _loader_failures(loader: Loader) -> list[str]:
    out = []
    if loader.failed:
        out.append(
            f"{len(loader.failed)} messages never acknowledged despite retries: "
            f"{loader.failed[0][1][:200]}"
        )
    if loader.refused:
        out.append(f"{len(loader.refused)} messages refused: {loader.refused[0][1][:200]}")
    return out


async def scenario_worker_kills(
    lab: Lab, *, messages: int = 3000, kills: int = 8, interval_s: float = 1.0
) -> Row:
    """(a) Two workers; every ``interval_s`` one of them is SIGKILLed and started again,
    ``kills`` times, while ``messages`` messages are sent and ingested."""
    async with Scenario(lab.services(), "kill -9 workers") as sc:
        workers = await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=max(messages / 10, 50))
        made = 0

        async def killer() -> None:
            nonlocal made
            made = await kill_workers_repeatedly(workers, kills=kills, interval_s=interval_s)

        await gather_with(loader.run(wl), killer())
        row = await sc.check(loader.acked, drain_timeout_s=120)
    row.notes.append(f"{made} worker kills, {sum(w.starts for w in workers)} worker starts")
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_redis_kill(
    lab: Lab, *, messages: int = 1500, crashes: int = 2, fsync: str = "always"
) -> Row:
    """(b) Redis (``appendonly yes``, ``appendfsync always``) is SIGKILLed under load and
    started again on the same port and folder, ``crashes`` times; the loader retries."""
    redis_server = lab.own_redis(appendonly=True, appendfsync=fsync)
    async with Scenario(lab.services(redis=redis_server), f"kill -9 redis (aof {fsync})") as sc:
        await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=max(messages / 10, 50))
        downtime: list[float] = []

        async def crash() -> None:
            for _ in range(crashes):
                await asyncio.sleep(10 / (crashes + 1))
                await asyncio.to_thread(redis_server.kill9)
                t = time.monotonic()
                await asyncio.sleep(1.0)
                await asyncio.to_thread(redis_server.start)
                downtime.append(time.monotonic() - t)

        await gather_with(loader.run(wl), crash())
        row = await sc.check(loader.acked, drain_timeout_s=60)
    row.notes.append(
        f"{len(downtime)} crashes, down {sum(downtime):.1f} s in all; "
        f"{loader.retries} remember() retries"
    )
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_redis_flushall(lab: Lab, *, per_session: int = 30, after: int = 4) -> Row:
    """(c) Sessions of ``per_session`` messages are ingested; then, with the workers
    running, the test Redis is flushed (FLUSHALL) and ``after`` more messages go to
    every session. The workers must recover and ingest them; ``context()`` of a
    session must show its last messages again, rebuilt from the ledger."""
    redis_server = lab.own_redis()
    async with Scenario(lab.services(redis=redis_server), "redis FLUSHALL") as sc:
        await sc.workers(2)
        wl = plan_workload(12 * (per_session + after), users=6, sessions_per_user=2)
        before = [s[:per_session] for s in wl.sessions]
        later = [s[per_session:] for s in wl.sessions]
        loader = Loader(sc.mem)
        await loader.run(before)
        drained_before, state = await wait_drained(sc.mem, 60)
        if not drained_before:
            raise ServiceError(f"the backlog did not drain before the flush: {state}")
        await asyncio.to_thread(redis_server.flushall)
        flushed_at = len(loader.acked)
        # Keep sending while the workers find out: ~2 s of traffic.
        paced = Loader(sc.mem, rate=max(len(later) * after / 2, 10))
        await paced.run(later)
        sent = [*loader.acked, *paced.acked]
        row = await sc.check(sent, drain_timeout_s=20)
        # The window of a session after the loss: its newest messages, old and new.
        n = sc.mem.settings.recent_window_read
        first = wl.sessions[0][0]
        mine = sorted((s for s in sent if s.turn.session_id == first.session_id),
                      key=lambda s: s.turn.ts_ms)  # fmt: skip
        expected = [s.msg_id for s in mine[-n:]]
        try:
            ctx = await sc.mem.context(first.user_id, first.session_id, "What is my budget?")
            shown = [i.key for i in ctx.manifest if i.layer == "window"]
            if set(shown) != set(expected):
                missing = [m for m in expected if m not in shown]
                row.extra_failures.append(
                    f"context() window of {first.session_id} after the flush shows "
                    f"{len(shown)} messages, {len(set(shown) & set(expected))} of its last {n} "
                    f"(window_rebuilt={ctx.window_rebuilt}); missing {_sample(missing, 4)}"
                )
        except MemstackError as exc:
            row.extra_failures.append(f"context() failed after the flush: {exc}")
    ingested = set(sc.last.ledger) if sc.last is not None else set()
    missing_after = sum(1 for s in paced.acked if s.msg_id not in ingested)
    row.notes.append(
        f"{flushed_at} messages before the flush, {len(paced.acked)} after "
        f"({missing_after} of them never reached the ledger)"
    )
    row.extra_failures += _loader_failures(loader) + _loader_failures(paced)
    return row


async def scenario_postgres_outage(
    lab: Lab, *, messages: int = 700, outage_s: float = 30.0, start_after_s: float = 3.0
) -> Row:
    """(d) The test PostgreSQL is shut down (immediate) for ``outage_s`` during ingest,
    then started again: no loss, no dead letters."""
    pg = lab.own_postgres()
    async with Scenario(lab.services(postgres=pg), f"postgres down {outage_s:.0f} s") as sc:
        await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=messages / (start_after_s + outage_s + 1))
        back: list[float] = []

        async def outage() -> None:
            await asyncio.sleep(start_after_s)
            await asyncio.to_thread(pg.stop)
            await asyncio.sleep(outage_s)
            await asyncio.to_thread(pg.start)
            back.append(time.monotonic())

        await gather_with(loader.run(wl), outage())
        drained = await wait_drained(sc.mem, 90)
        drained_at = time.monotonic()
        row = await sc.check(loader.acked, drain_timeout_s=1)
        row.drained = drained[0]
    row.notes.append(f"drained {drained_at - back[0]:.1f} s after PostgreSQL came back")
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_chroma_outage(
    lab: Lab, *, messages: int = 700, outage_s: float = 30.0, start_after_s: float = 3.0
) -> Row:
    """(e) The Chroma server is stopped for ``outage_s`` during ingest, then started
    again on the same data: no loss, no dead letters."""
    chroma = lab.own_chroma()
    async with Scenario(lab.services(chroma=chroma), f"chroma down {outage_s:.0f} s") as sc:
        await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=messages / (start_after_s + outage_s + 1))
        back: list[float] = []

        async def outage() -> None:
            await asyncio.sleep(start_after_s)
            await asyncio.to_thread(chroma.stop)
            await asyncio.sleep(outage_s)
            await asyncio.to_thread(chroma.start)
            back.append(time.monotonic())

        await gather_with(loader.run(wl), outage())
        drained = await wait_drained(sc.mem, 90)
        drained_at = time.monotonic()
        row = await sc.check(loader.acked, drain_timeout_s=1)
        row.drained = drained[0]
    row.notes.append(f"drained {drained_at - back[0]:.1f} s after Chroma came back")
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_forget_mid_batch(
    lab: Lab, *, messages: int = 80, delay_s: float = 2.0, after_s: float = 5.0
) -> Row:
    """(f) One worker embeds through a server that answers after ``delay_s``; while it
    is mid-batch (ledger written, embedding in flight), ``forget_user(u)`` runs. When
    the batch is over and ``after_s`` more have passed, nothing of u may be in the
    ledger, the facts or the vectors; the other user's messages must all be there."""
    embeddings = SlowEmbeddings(delay_s)
    lab.track(embeddings)
    overrides: dict[str, object] = {"embedder": "openai", "embed_url": embeddings.url}
    async with Scenario(lab.services(), "forget mid-batch", oracle=False, **overrides) as sc:
        await sc.mem.memory_vectors()  # its dimension probe, before the clock matters
        wl = plan_workload(messages, users=2, sessions_per_user=2)
        target, keep = wl.users
        loader = Loader(sc.mem)
        await loader.run(wl)  # all queued first: the worker's first batch is a full one
        await sc.workers(1)
        # Mid-batch: the worker wrote the ledger rows of a batch holding the target's
        # messages and waits for their embeddings.
        deadline = time.monotonic() + 30
        while True:
            async with sc.mem.sessions() as s:
                rows = list(await s.scalars(
                    select(MessageRow.msg_id).where(MessageRow.user_id == target)
                ))  # fmt: skip
            if rows and embeddings.in_flight:
                break
            if time.monotonic() > deadline:
                raise ServiceError("the worker never got mid-batch on the target's messages")
            await asyncio.sleep(0.05)
        forgotten = await sc.mem.forget_user(target)
        drained = await wait_drained(sc.mem, 60)
        await embeddings.idle()
        await asyncio.sleep(after_s)
        kept = [s for s in loader.acked if s.turn.user_id == keep]
        row = await sc.check(kept, drain_timeout_s=1, users=[keep])
        row.drained = drained[0]
        left = await snapshot(sc.mem, sc.dep.vector_url, [target])
        remains = {
            "ledger rows": len(left.ledger),
            "facts": len(left.facts),
            "vectors": len(left.vectors),
        }
        if any(remains.values()):
            row.extra_failures.append(
                f"forgotten user {target} still has "
                + ", ".join(f"{n} {what}" for what, n in remains.items())
                + f" {after_s:.0f} s after the batch (forget_user said {forgotten})"
            )
        ctx = await sc.mem.facts(target)
        if ctx:
            row.extra_failures.append(f"facts({target}) still answers {len(ctx)} facts")
    row.notes.append(f"forget_user during a batch of {len(rows)} ledger rows of the target")
    row.extra_failures += _loader_failures(loader)
    return row


async def scenario_reindex_during_ingest(lab: Lab, *, messages: int = 1000) -> Row:
    """(g) ``AsyncMemory.reindex()`` while two worker processes ingest: no dead letters,
    every message in the vectors afterwards."""
    async with Scenario(lab.services(), "reindex during ingest") as sc:
        await sc.workers(2)
        wl = plan_workload(messages)
        loader = Loader(sc.mem, rate=max(messages / 10, 50))
        reports: list[Any] = []

        async def reindex() -> None:
            await asyncio.sleep(4)
            reports.append(await sc.mem.reindex())

        await gather_with(loader.run(wl), reindex())
        row = await sc.check(loader.acked, drain_timeout_s=30)
    if reports:
        r = reports[0]
        row.notes.append(f"reindex rebuilt {getattr(r, 'messages', '?')} messages mid-ingest")
    row.extra_failures += _loader_failures(loader)
    return row


SCENARIOS: dict[str, Callable[..., Awaitable[Row]]] = {
    "worker-kills": scenario_worker_kills,
    "redis-kill": scenario_redis_kill,
    "redis-flushall": scenario_redis_flushall,
    "postgres-outage": scenario_postgres_outage,
    "chroma-outage": scenario_chroma_outage,
    "forget-mid-batch": scenario_forget_mid_batch,
    "reindex": scenario_reindex_during_ingest,
}
