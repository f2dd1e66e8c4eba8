"""Whether a long-running process may start: the configurations ``memstack doctor`` calls
unsafe, checked by ``memstack serve``, ``worker`` and ``mcp`` before they open anything.

A server deployment that is set up to lose or split data still starts and answers: a
Redis that keeps nothing on disk loses the queued messages at its next restart, and a
store each process keeps for itself in a relative MEMSTACK_HOME sends a worker's vectors
where the API never reads (context() then answers keyword-only without a word). Both
are silent until it is too late, so the processes refuse them unless told otherwise
(``MEMSTACK_ALLOW_UNSAFE``). The reasons are doctor's own, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstack.core.settings import Settings
from memstack.ops.doctor import SERVER_OF, knowledge_base_exists, per_process, redis_persistence

# Where a refusal about a store kept per process points: the generated setup shares all.
SAFE_SETUP = "`memstack init --servers` writes a setup that shares every store"


@dataclass(frozen=True)
class Unsafe:
    """One reason doctor calls the configuration unsafe."""

    setting: str  # the variable to set or fix, e.g. MEMSTACK_VECTOR_URL
    why: str  # what goes wrong and the fix, in doctor's words

    @property
    def line(self) -> str:
        return f"{self.setting}: {self.why}"


def kept_per_process(settings: Settings) -> list[Unsafe]:
    """The stores a server deployment's processes would each keep for themselves (no
    I/O; the knowledge base counts whether or not one exists yet)."""
    urls = {
        "database": settings.database_url,
        "vectors": settings.vector_url,
        "knowledge base": settings.kb_url,
    }
    found = []
    for store, url in urls.items():
        if not url and (why := per_process(settings, store)):
            found.append(Unsafe(SERVER_OF[store][0], why))
    return found


async def unsafe_settings(settings: Settings) -> list[Unsafe]:
    """Every reason ``memstack doctor`` would call ``settings`` unsafe (an empty list for
    a safe configuration, and for the embedded default, which is one process).

    A store that cannot be reached is not a reason here: the process's own start says
    that it is down, with the URL and the fix."""
    found = []
    for unsafe in kept_per_process(settings):
        if unsafe.setting == "MEMSTACK_KB_URL" and not await _kb_exists(settings):
            continue
        found.append(unsafe)
    if settings.redis_url:
        try:
            keeps, how = await redis_persistence(settings)
        except Exception:  # down or refusing: the start reports it
            keeps = True
        if not keeps:
            found.insert(0, Unsafe("MEMSTACK_REDIS_URL", f"the Redis {how}"))
    return found


async def _kb_exists(settings: Settings) -> bool:
    """As doctor: a knowledge base kept per process matters once there is one. Its
    registry is in the database; a database kept per process is refused already, and
    looking into it would create a SQLite file in the very folder that is the problem."""
    return bool(settings.database_url) and await knowledge_base_exists(settings, 0)


def refusal(found: list[Unsafe]) -> str:
    """The one line a process that will not start prints: the first reason in full."""
    more = f" (and {len(found) - 1} more; `memstack doctor` lists them)" if len(found) > 1 else ""
    setup = "" if found[0].setting == "MEMSTACK_REDIS_URL" else f"; {SAFE_SETUP}"
    return (
        f"unsafe configuration, {found[0].line}{more}{setup}; MEMSTACK_ALLOW_UNSAFE=1 starts anyway"
    )


def override_warning(found: list[Unsafe]) -> str:
    """The one line a process started by the override logs: everything that is unsafe."""
    return "MEMSTACK_ALLOW_UNSAFE is set: starting in an unsafe configuration: " + "; ".join(
        u.line for u in found
    )
