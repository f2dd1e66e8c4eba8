"""A synchronous facade for scripts: :class:`Memory` runs one :class:`AsyncMemory` on a
private event loop thread and forwards each call to it, so there is one implementation.

The plain forwarders are generated (memstack/_sync_generated.py, by scripts/gen_sync.py);
this module holds what is not a plain forward: the loop, opening and closing, and the
iterator of export lines.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from memstack._sync_generated import MemoryForwarders
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory

T = TypeVar("T")

# AsyncMemory's public coroutines without a Memory twin, and why. scripts/gen_sync.py
# writes a forwarder for every other one that Memory below does not write by hand.
ASYNC_ONLY = frozenset(
    {
        "open",  # Memory() opens in its constructor
        # store handles for the server, the CLI and the tests; not part of the API
        "memory_vectors",
        "worker",
        "knowledge_base",
        "knowledge_cache",
        "keys_without_ttl",
    }
)


class Memory(MemoryForwarders):
    """``with Memory() as mem: mem.remember(...)`` — the same core as :class:`AsyncMemory`."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memstack", daemon=True)
        self._thread.start()
        try:
            self.aio = self._run(AsyncMemory.open(settings))
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.aio.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def settings(self) -> Settings:
        return self.aio.settings

    def export_lines(self, user_id: str | None = None) -> Iterator[str]:
        """See :meth:`AsyncMemory.export_lines`: the user id is checked at once."""
        lines = self.aio.export_lines(user_id)

        async def step() -> str | None:
            return await anext(lines, None)

        def taken() -> Iterator[str]:
            try:
                while (line := self._run(step())) is not None:
                    yield line
            finally:
                self._run(lines.aclose())

        return taken()
