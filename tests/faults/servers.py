"""The servers of the fault harness, each its own: started here, broken on purpose.

A ``redis-server``, a throw-away PostgreSQL cluster (``initdb`` + ``pg_ctl``) and a
``chroma run``, each on a free port with its data in a temporary folder, so the shared
Redis (6379) and PostgreSQL (5432) of the machine are never touched. Each can be
started, stopped, ``kill9``-ed and started again on the same port and data (Redis
reloads its AOF). :class:`SlowEmbeddings` is an embeddings server that takes its time.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Literal

import psycopg
import redis
from redis.exceptions import RedisError

from memstack.core.settings import load_settings
from memstack.stores.sql import db
from tests.faults.processes import (
    ServiceError,
    child_env,
    clean_env,
    end_process,
    free_port,
    reap_later,
    tail,
    track,
    untrack,
)

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
        track(self)
        reap_later("dir", self.dir, cwd_of="redis-server")

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
            env=child_env(),
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
        end_process(self.proc, sig=signal.SIGKILL, timeout_s=10)

    def stop(self) -> None:
        end_process(self.proc, sig=signal.SIGTERM, timeout_s=10)

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
        untrack(self)

    def __enter__(self) -> RedisInstance:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- PostgreSQL --------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        track(self)
        user = {"user": self.os_user} if self.os_user else {}
        pg_ctl = str(self.bindir / "pg_ctl")
        reap_later("pgdata", self.data, root=str(self.dir), pg_ctl=pg_ctl, **user)

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
            env=child_env(),  # the postmaster inherits the reaper's token
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
        untrack(self)

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
        track(self)
        reap_later("dir", self.dir)

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
                cwd=self.dir, env=clean_env(),
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
        end_process(self.proc, sig=signal.SIGTERM, timeout_s=15)

    def kill9(self) -> None:
        end_process(self.proc, sig=signal.SIGKILL, timeout_s=10)

    def close(self) -> None:
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)
        untrack(self)

    def __enter__(self) -> ChromaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- a slow embeddings server ------------------------------------------------------------


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
        track(self)

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
        untrack(self)
