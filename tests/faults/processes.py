"""The processes the fault harness starts: how they are tracked, ended and reaped.

A process is only ever stopped by the PID this harness started; every tracked
instance is also closed at interpreter exit if its owner forgot, and a reaper process
ends them and removes their folders if this process is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol


class ServiceError(RuntimeError):
    """A server of the harness did not start or stop as asked."""


class Closable(Protocol):
    def close(self) -> None: ...


# Instances still open: closed at interpreter exit, so no server outlives a crashed run.
_LIVE: dict[int, Closable] = {}


def track(obj: Closable) -> None:
    _LIVE[id(obj)] = obj


def untrack(obj: Closable) -> None:
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


def end_process(proc: subprocess.Popen[bytes] | None, *, sig: int, timeout_s: float) -> int | None:
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


def reap_later(kind: str, path: Path, **extra: str) -> None:
    """Have the reaper remove ``path`` (and stop the cluster of a ``pgdata`` folder) if
    this process dies without closing it."""
    state = _ensure_reaper()
    with (state / "jobs").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"kind": kind, "path": str(path), **extra}) + "\n")


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with the token the reaper looks for."""
    _ensure_reaper()
    return {**(os.environ if base is None else base), TOKEN_VAR: _TOKEN}


def clean_env() -> dict[str, str]:
    """This process's environment without any ``MEMSTACK_*`` setting (a child gets only
    the settings its deployment names), with the folder of the ``memstack`` package
    this process imported first on ``PYTHONPATH`` (a worker runs the same code as the
    test that started it, whatever its working directory) and the reaper's token."""
    import memstack

    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    root = str(Path(memstack.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return child_env(env)
