"""One process at a time per embedded home.

The embedded stores are not made for several processes: the in-process Redis is
invisible to another process, and two local Chroma or Qdrant clients on one folder
corrupt each other's index or refuse each other. A process that opens an embedded store
of a home takes the home's lock (``<home>/.lock``, an advisory ``flock`` the system
drops when the process dies, however it dies) and keeps it until it exits; a second
process gets :class:`~memstack.core.errors.HomeInUse`, which names the first and the fix.
Every ``AsyncMemory`` of one process shares the process's hold.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import IO

from memstack.core.errors import HomeInUse

_held: dict[Path, IO[str]] = {}
_lock = threading.Lock()

FIX = (
    "An embedded home serves one process at a time: stop that process, or reach its "
    "memory through it (memstack serve's HTTP API, memstack mcp), or run on servers "
    "(MEMSTACK_REDIS_URL, MEMSTACK_DATABASE_URL, MEMSTACK_VECTOR_URL, MEMSTACK_KB_URL; "
    "see the README), or give this process its own MEMSTACK_HOME."
)


def holder(home: Path) -> str | None:
    """Who holds ``home`` if another process does (for ``memstack doctor``), else None."""
    try:
        import fcntl
    except ImportError:
        return None
    key = home.resolve()
    if key in _held or not (key / ".lock").exists():
        return None
    with open(key / ".lock", "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            return handle.read().strip() or "another process"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def claim(home: Path) -> None:
    """Hold ``home`` for this process (a no-op if it already does)."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the stores' own checks remain
        return
    key = home.resolve()
    with _lock:
        if key in _held:
            return
        key.mkdir(parents=True, exist_ok=True)
        handle = open(key / ".lock", "a+", encoding="utf-8")  # noqa: SIM115 (held until exit)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise HomeInUse(f"MEMSTACK_HOME {key} is in use by {holder}. {FIX}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} ({' '.join(sys.argv)[:200]})")
        handle.flush()
        _held[key] = handle
