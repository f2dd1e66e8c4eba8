"""Export and import over the HTTP API, for both clients: the export arrives as JSON
Lines, which the client hands on line by line or writes where the caller asked (a path,
written under a temporary name and renamed once complete, as the library does; or a
stream); an import file is read here, on the client, and sent as the request body.
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from memstack.client._wire import Call, build, call, user_path
from memstack.core.errors import MemstackError, StoreUnavailable
from memstack.types import ExportReport, ImportReport

# memstack.transfer's types: where an export goes, what an import reads, its progress.
ExportTarget = str | os.PathLike[str] | IO[bytes] | IO[str]
ImportSource = str | os.PathLike[str] | bytes | IO[bytes] | IO[str]
TransferProgress = Callable[[str, int, int], None]
NDJSON = "application/x-ndjson"


def export_call(user_id: str | None) -> Call[None]:
    """The export of one user, or of everyone and the knowledge base (``None``); its
    answer is streamed, never parsed whole."""
    path = "/v1/export" if user_id is None else user_path(user_id, "export")
    return call("GET", path, lambda _: None)


class ExportSink:
    """Where the lines of an export go, and the report the library would give of them:
    the header's users and the records by type. ``skipped_documents`` does not travel
    (the server logs them): it stays empty."""

    def __init__(self, out: ExportTarget, progress: TransferProgress | None) -> None:
        self.out = out
        self.progress = progress
        self.report = ExportReport()
        self.counts: Counter[str] = Counter()
        self._ended = False

    @contextmanager
    def opened(self) -> Iterator[Callable[[str], None]]:
        """A writer of lines; a path is complete under its name only if all went well."""
        if not isinstance(self.out, str | os.PathLike):
            stream = self.out
            text = isinstance(stream, io.TextIOBase)
            yield lambda line: self._write(stream, line, text)
            stream.flush()
            self._finish()
            return
        path = Path(self.out)
        partial = path.with_name(f".{path.name}.partial")
        try:
            with partial.open("wb") as f:
                yield lambda line: self._write(f, line, False)
            self._finish()
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)

    def _write(self, stream: IO[Any], line: str, text: bool) -> None:
        try:
            record = json.loads(line)
            kind = record["type"]
        except (ValueError, TypeError, KeyError):
            raise MemstackError(
                f"the server sent a line that is no export record: {line[:80]!r}"
            ) from None
        if kind == "header":
            self.report.users = list(record.get("users", []))
        elif kind == "end":
            self._ended = True
        else:
            self.counts[str(kind)] += 1
        stream.write(line if text else line.encode("utf-8"))

    def _finish(self) -> None:
        if not self._ended:
            # The server's stream ended without its end record: it failed midway.
            raise StoreUnavailable(
                "the server's export was cut short (no end record); try again", layer="server"
            )
        self.report.records = dict(self.counts)
        if self.progress is not None:
            users = len(self.report.users)
            self.progress("exporting", users, users)


def import_call(source: ImportSource, progress: TransferProgress | None) -> Call[ImportReport]:
    """The file (a path, its bytes, or a binary or text stream), read here and sent
    whole: the server checks it all before writing, and refuses one over
    MEMSTACK_MAX_BODY_BYTES (``memstack import`` on its host takes any size).
    ``progress("writing", n, n)`` is called once, after the server has answered."""
    body = _read(source)

    def read(d: Any) -> ImportReport:
        report = build(ImportReport, d)
        if progress is not None:
            total = sum(report.records.values())
            progress("writing", total, total)
        return report

    c = call("POST", "/v1/import", read)
    return Call(c.method, c.path, c.parse, content=body, content_type=NDJSON)


def _read(source: ImportSource) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, str | os.PathLike):
        return Path(source).read_bytes()
    data = source.read()
    return data.encode("utf-8") if isinstance(data, str) else data
