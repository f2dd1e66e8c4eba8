"""Moving memory out of a deployment and into another: export and import (JSON Lines, see
:mod:`memstack.transfer.records`).

A mixin of :class:`memstack.AsyncMemory`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from memstack.core.ids import validate_id
from memstack.transfer.exporting import Exporter, ExportTarget, write_export
from memstack.transfer.importing import Importer, ImportSource, TransferProgress
from memstack.types import ExportReport, ImportReport
from memstack.verbs.base import Verbs

if TYPE_CHECKING:
    from memstack.ingest.pipeline import Ingestor


class Portability(Verbs):
    def _exporter(self, user_id: str | None, progress: TransferProgress | None) -> Exporter:
        if user_id is not None:
            validate_id("user_id", user_id)
        return Exporter(
            self.stores.settings,
            self.stores.db_sessions,
            self.stores.working,
            self.stores.knowledge_base,
            user_id=user_id,
            progress=progress,
        )

    async def export(
        self,
        out: ExportTarget,
        *,
        user_id: str | None = None,
        progress: TransferProgress | None = None,
    ) -> ExportReport:
        """Write ``user_id``'s memory, or with ``user_id=None`` every user's and the
        knowledge base, to ``out`` (a path, or a binary or text stream) as JSON Lines:
        the ledger, the whole fact history, fact candidates with their decisions, the
        names the user speaks under, summaries, tool results and task state. A path
        is written under a temporary name and renamed once complete. Messages still in the
        ingest queue are not in the ledger yet: drain first. ``progress(stage, done,
        total)`` is called after each user."""
        return await write_export(self._exporter(user_id, progress), out)

    def export_lines(self, user_id: str | None = None) -> AsyncGenerator[str, None]:
        """The export :meth:`export` writes, line by line (``async for``); the user id is
        checked at once, the stores are read as the lines are taken."""
        return self._exporter(user_id, None).lines()

    async def import_file(
        self, source: ImportSource, *, progress: TransferProgress | None = None
    ) -> ImportReport:
        """Read an export (a path, the file's bytes, or a binary or text stream) into this
        deployment: rows already here are kept (importing twice changes nothing), messages
        and summaries are embedded with this deployment's embedder, facts and fact
        candidates are written as they were (never extracted again; their ids are this
        deployment's, their links mapped), and a user's names replace those bound here.

        The whole file is checked before anything is written: a bad line, a record of an
        unknown type or version, a missing field, a file cut short, or an id that belongs
        to another user here raises :class:`~memstack.core.errors.ValidationError`
        naming the line, and nothing changes. ``progress(stage, done, total)``: see
        :data:`~memstack.transfer.importing.TransferProgress`."""

        async def ingestor() -> Ingestor:
            return (await self.stores.worker()).ingestor

        importer = Importer(
            self.stores.settings,
            self.stores.db_sessions,
            self.stores.working,
            ingestor,
            self.stores.knowledge_base,
            progress,
        )
        return await importer.run(source)
