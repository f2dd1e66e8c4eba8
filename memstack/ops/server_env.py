"""``memstack init --servers``: the env file of a server deployment.

Every process of a deployment (the API, each worker, an MCP server, the CLI) must see
the same stores; one file holding every setting that decides where they are, loaded by
each process, is the one way they cannot drift apart. The file is written only after
the settings loader accepted what it holds and the start check (ops/safety.py) found no
store a process would keep for itself.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from memstack.core.errors import ConfigError
from memstack.core.settings import Settings, load_settings
from memstack.ops.safety import kept_per_process

PREFIX = "MEMSTACK_"
# Characters a shell takes as they are: any other value is quoted (a URL's query has &).
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./~-]+")
VectorKind = Literal["chroma", "qdrant"]
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/memstack"
DEFAULT_VECTOR_URL: dict[VectorKind, str] = {
    "chroma": "http://127.0.0.1:8000",
    "qdrant": "http://127.0.0.1:6333",
}


@dataclass
class ServerSetup:
    """What the file says; a URL left None is written as its placeholder."""

    home: Path
    redis_url: str | None = None
    database_url: str | None = None
    vector_store: VectorKind = "chroma"
    vector_url: str | None = None
    kb_store: VectorKind | None = None  # None: the vector store's kind
    kb_url: str | None = None  # None: the vector server, shared the same way
    # A fresh token per file: an API reachable by others is never left without one.
    api_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))


def _quoted(value: str) -> str:
    return value if _PLAIN.fullmatch(value) else shlex.quote(value)


def _placeholder(value: str | None, default: str) -> tuple[str, str]:
    if value:
        return _quoted(value), ""
    # On a line of its own: systemd and docker take the rest of a line for the value.
    return default, "# PLACEHOLDER: replace with your server's URL (an option of init)\n"


def render(setup: ServerSetup) -> str:
    """The env file's text: ``KEY=value`` lines with comments; a value is quoted only
    when a shell needs it (docker's --env-file keeps quotes, a shell and systemd do not)."""
    redis, redis_note = _placeholder(setup.redis_url, DEFAULT_REDIS_URL)
    database, database_note = _placeholder(setup.database_url, DEFAULT_DATABASE_URL)
    vectors, vectors_note = _placeholder(setup.vector_url, DEFAULT_VECTOR_URL[setup.vector_store])
    kb_store = setup.kb_store or setup.vector_store
    kb, kb_note = (_quoted(setup.kb_url), "") if setup.kb_url else (vectors, vectors_note)
    return f"""\
# memstack server deployment, written by `memstack init --servers`.
# Every process (memstack serve, memstack worker, memstack mcp, the CLI) loads this one
# file, so the API and the workers share every store whatever folder they start in:
#   set -a; . /path/to/memstack.env; set +a    (a shell)
#   EnvironmentFile=/path/to/memstack.env      (systemd; docker --env-file if nothing is quoted)
# Then `memstack db upgrade` once and `memstack doctor`: serve, worker and mcp refuse to
# start in a configuration doctor calls unsafe. The file holds the API token: keep it private.

# Working memory and the ingest queue. Until a worker has stored a message, its job lives
# only here: run this Redis with appendonly yes (appendfsync everysec).
{redis_note}{PREFIX}REDIS_URL={redis}

# The ledger, facts and summaries (PostgreSQL; create the database first).
{database_note}{PREFIX}DATABASE_URL={database}

# Semantic memory on a vector server every process reaches (`chroma run` or Qdrant).
{PREFIX}VECTOR_STORE={setup.vector_store}
{vectors_note}{PREFIX}VECTOR_URL={vectors}

# The knowledge base, on a server too, so `memstack kb add` and the API share it.
{PREFIX}KB_STORE={kb_store}
{kb_note}{PREFIX}KB_URL={kb}

# One absolute folder: a relative one is another folder for each working directory.
{PREFIX}HOME={_quoted(str(setup.home))}

# Bearer token of the HTTP API (an admin key): clients send Authorization: Bearer <token>.
{PREFIX}API_TOKEN={setup.api_token}
"""


def _values(text: str) -> dict[str, str]:
    """The settings the file sets, read as pydantic-settings reads an env file."""
    from dotenv import dotenv_values

    read = dotenv_values(stream=io.StringIO(text))
    return {k.removeprefix(PREFIX).lower(): v for k, v in read.items() if v is not None}


def check(text: str) -> Settings:
    """The settings ``text`` makes, or :class:`ConfigError` naming what is wrong: a
    value the settings refuse, or a store the processes would not share."""
    settings = load_settings(**_values(text))
    if found := kept_per_process(settings):
        raise ConfigError(found[0].line)
    return settings


def write(path: Path, setup: ServerSetup, *, force: bool = False) -> Settings:
    """Check the file's text, then write it to ``path`` readable by its owner only (it
    holds the API token, and a URL may hold a password); an existing file is kept
    unless ``force`` (:class:`FileExistsError`)."""
    if not setup.home.is_absolute():
        raise ConfigError("MEMSTACK_HOME must be an absolute folder")
    text = render(setup)
    settings = check(text)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)  # a file overwritten with --force keeps its mode otherwise
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return settings
