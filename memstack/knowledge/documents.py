"""Documents of the knowledge base: reading files and folders, and checking every
document before anything is written.

A :class:`Document` is checked by :func:`normalise`: its text, title and source with
:func:`memstack.core.inputs.check_text` (no NUL, no lone surrogate), its text within
``max_document_bytes`` and not blank, its id with :func:`memstack.core.ids.validate_id`.
A refused document raises :class:`~memstack.core.errors.InvalidContent` (or
:class:`~memstack.core.errors.InvalidId`) and nothing of the call is written.

Files: a file named explicitly must be a readable, non-empty text or Markdown file within
the size limit, or the whole call is refused. A folder adds what it can: each of its
files (hidden ones aside) that is of another type, empty, not UTF-8 text (binary),
over the size limit or unreadable is skipped and reported as a :class:`Skipped`
(``memstack kb add`` lists them); only when nothing at all is left to add does the call
fail.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memstack.core.errors import InvalidContent, ValidationError
from memstack.core.ids import text_hash, validate_id
from memstack.core.inputs import check_text
from memstack.types import Document as Document
from memstack.types import Skipped as Skipped

SUFFIXES = frozenset({".md", ".markdown", ".txt", ".text"})
MAX_TITLE_LEN = 300
# A source is a path or a caller's label, not content.
MAX_SOURCE_BYTES = 4096
_MAX_DOC_ID_STEM = 100
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_.:@-]+")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_LIMIT_NAME = "MEMSTACK_MAX_DOCUMENT_BYTES"


@dataclass(frozen=True)
class Loaded:
    """What :func:`load_documents` read: the checked documents and the skipped files."""

    documents: list[Document]
    skipped: list[Skipped] = field(default_factory=list)


class _Unusable(Exception):
    """A file that cannot be a document; ``reason`` says why (without the path)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Source = Path | str | Document


def slug_id(name: str) -> str:
    """A valid doc id for ``name`` (a file stem or relative path).

    Names that are already safe are kept as they are; others (Chinese file names,
    spaces) keep their safe characters and get a hash suffix, so "清结算.md" and
    "合规.md" do not both become "-".
    """
    stem = _UNSAFE_ID_CHARS.sub("-", name).strip("-.")[:_MAX_DOC_ID_STEM]
    if stem == name and stem:
        return stem
    suffix = text_hash(name)[:10]
    return f"{stem}-{suffix}" if stem else f"doc-{suffix}"


def _title_of(text: str, fallback: str, markdown: bool) -> str:
    if markdown and (heading := _MD_HEADING.search(text)):
        return heading.group(1)[:MAX_TITLE_LEN]
    if fallback:
        return fallback[:MAX_TITLE_LEN]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:80]


def _label(doc: Document) -> str:
    """How an error names ``doc``: by its id when it has a usable one."""
    if isinstance(doc.doc_id, str) and doc.doc_id.isascii() and doc.doc_id.isprintable():
        return f"document {doc.doc_id[:64]!r}"
    return "document"


def normalise(doc: Document, max_bytes: int) -> Document:
    """``doc`` checked (see the module docstring), with its id, title and source filled
    in; :class:`InvalidContent` or :class:`~memstack.core.errors.InvalidId` if refused."""
    label = _label(doc)
    text = check_text(f"text of {label}", doc.text, max_bytes=max_bytes)
    if doc.doc_id is not None:
        validate_id("doc_id", doc.doc_id)
    if doc.title is not None:
        check_text(f"title of {label}", doc.title)
    if doc.source is not None:
        check_text(f"source of {label}", doc.source, max_bytes=MAX_SOURCE_BYTES)
    if not text.strip():
        raise InvalidContent(f"{label} is empty: its text holds nothing but whitespace")
    doc_id = doc.doc_id if doc.doc_id is not None else f"text-{text_hash(text)[:16]}"
    title = doc.title if doc.title is not None else _title_of(text, "", False)
    return Document(
        text=text,
        doc_id=doc_id,
        title=title[:MAX_TITLE_LEN],
        source=doc.source if doc.source is not None else "api",
    )


def _read_text(path: Path, max_bytes: int) -> str:
    """The text of ``path``, or :class:`_Unusable` saying why it cannot be a document."""
    try:
        check_text("file name", str(path))
    except InvalidContent:
        raise _Unusable("its name is not valid UTF-8") from None
    try:
        size = path.stat().st_size
        if size > max_bytes:  # not read at all: the file may be huge
            raise _Unusable(f"{size} bytes; the limit is {max_bytes} ({_LIMIT_NAME})")
        data = path.read_bytes()
    except OSError as exc:
        raise _Unusable(f"cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unusable(f"binary or not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if "\x00" in text:
        raise _Unusable("binary: it contains NUL bytes")
    if len(data) > max_bytes:  # grew since stat()
        raise _Unusable(f"{len(data)} bytes; the limit is {max_bytes} ({_LIMIT_NAME})")
    if not text.strip():
        raise _Unusable("empty")
    return text


def _read_file(path: Path, name: str, max_bytes: int) -> Document:
    """The document of ``path``, its id made from ``name``; :class:`_Unusable` if none."""
    text = _read_text(path, max_bytes)  # checks the path's name first
    markdown = path.suffix.lower() in (".md", ".markdown")
    doc = Document(
        text=text,
        doc_id=slug_id(name),
        title=_title_of(text, path.stem, markdown),
        source=str(path.resolve()),
    )
    try:
        return normalise(doc, max_bytes)
    except ValidationError as exc:  # e.g. a path too long to be a source
        raise _Unusable(str(exc)) from None


def _printable(path: Path) -> str:
    # A name that is not UTF-8 (a lone surrogate in Python) is shown escaped.
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def _folder_files(path: Path) -> list[Path]:
    """The files of a folder, hidden ones (and those in hidden folders) left out."""
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )


def _documents_of_path(path: Path, max_bytes: int) -> Loaded:
    if path.is_file():
        if path.suffix.lower() not in SUFFIXES:
            raise ValidationError(
                f"{_printable(path)}: unsupported file type {path.suffix or '(none)'}; "
                f"the knowledge base takes {', '.join(sorted(SUFFIXES))}"
            )
        try:
            return Loaded([_read_file(path, path.stem, max_bytes)])
        except _Unusable as exc:
            raise InvalidContent(f"{_printable(path)}: {exc.reason}") from None
    if not path.is_dir():
        raise ValidationError(f"{_printable(path)}: no such file or folder")
    files = _folder_files(path)
    if not any(p.suffix.lower() in SUFFIXES for p in files):
        suffixes = ", ".join(sorted(SUFFIXES))
        raise ValidationError(f"{_printable(path)}: no {suffixes} files in this folder")
    loaded = Loaded([])
    for p in files:
        if p.suffix.lower() not in SUFFIXES:
            kind = p.suffix or "no suffix"
            loaded.skipped.append(Skipped(_printable(p), f"not a text or Markdown file ({kind})"))
            continue
        # Ids from the path inside the folder, so two folders' README.md differ by place.
        name = ".".join(p.relative_to(path).with_suffix("").parts)
        try:
            loaded.documents.append(_read_file(p, name, max_bytes))
        except _Unusable as exc:
            loaded.skipped.append(Skipped(_printable(p), exc.reason))
    return loaded


def load_documents(sources: Sequence[Source], max_bytes: int) -> Loaded:
    """Read and check every source before anything is written.

    A :class:`~pathlib.Path` is a file or a folder (its text and Markdown files, hidden
    ones skipped); a ``str`` is the text of a document; a :class:`Document` is text with
    its id, title and source. Raises :class:`ValidationError` on the first bad source,
    on two documents with one id, or when every file was skipped.
    """
    if isinstance(sources, str | Path | Document):
        raise ValidationError("sources must be a sequence of paths, texts or Documents")
    if not sources:
        raise ValidationError("nothing to add: give at least one path or text")
    loaded = Loaded([])
    for source in sources:
        if isinstance(source, Path):
            found = _documents_of_path(source, max_bytes)
            loaded.documents.extend(found.documents)
            loaded.skipped.extend(found.skipped)
        elif isinstance(source, str):
            loaded.documents.append(normalise(Document(text=source), max_bytes))
        elif isinstance(source, Document):
            loaded.documents.append(normalise(source, max_bytes))
        else:
            raise ValidationError(
                f"cannot add a {type(source).__name__}: give a Path, a str or a Document"
            )
    if not loaded.documents:
        raise ValidationError(
            f"nothing to add: every file was skipped ({describe(loaded.skipped)})"
        )
    seen: dict[str, str] = {}
    for doc in loaded.documents:
        assert doc.doc_id is not None
        if doc.doc_id in seen:
            raise ValidationError(
                f"two documents have the id {doc.doc_id!r} ({seen[doc.doc_id]} and {doc.source})"
            )
        seen[doc.doc_id] = doc.source or ""
    return loaded


def describe(skipped: Sequence[Skipped], most: int = 5) -> str:
    """The skipped files in one line: the first ``most`` with their reasons."""
    shown = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:most])
    more = len(skipped) - most
    return shown + (f"; and {more} more" if more > 0 else "")
