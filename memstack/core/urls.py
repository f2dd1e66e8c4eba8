"""The server URLs of the settings, checked part by part when the settings are read.

A client library reads a malformed URL its own way: redis-py takes ``redis://host/abc``
for database 0 and SQLAlchemy a PostgreSQL URL without a database name for the user's
own database, so a typo silently writes somewhere else. Each check here raises
:class:`ValueError` naming the part that is wrong (scheme, host, port, database) and
what is expected, without connecting anywhere and without importing the clients.

A message repeats a part of the URL only when the URL holds no password: a password
with a ``/`` or ``#`` in it is cut into other parts by the parser, so any part of such
a URL could be a piece of it.
"""

from __future__ import annotations

import os
from urllib.parse import SplitResult, parse_qs, urlsplit

REDIS_FORM = "redis://[:password@]host:6379/0, rediss://… or unix:///path/redis.sock?db=0"
DATABASE_FORM = "postgresql://user[:password]@host:5432/dbname or sqlite:///path/memstack.db"
HTTP_FORM = "http://host:port or https://host:port"

REDIS_SCHEMES = ("redis", "rediss", "unix")
POSTGRES_SCHEMES = (
    "postgresql",
    "postgres",
    "postgresql+psycopg",
    "postgresql+psycopg2",
    "postgresql+asyncpg",
)
SQLITE_SCHEMES = ("sqlite", "sqlite+aiosqlite")
HTTP_SCHEMES = ("http", "https")
MASK = "****"


def _shown(url: str, part: str) -> str:
    """`` 'part'`` to quote in a message, or nothing when the URL holds a password."""
    rest = url.partition("://")[2]
    userinfo = rest[: rest.rfind("@")] if "@" in rest else ""
    return "" if ":" in userinfo else f" {part!r}"


def _split(url: str, form: str) -> SplitResult:
    """The URL's parts; a URL with no scheme or with blanks in it is no URL."""
    if any(c.isspace() for c in url):
        raise ValueError(f"the URL contains a space or line break (expected {form})")
    if "://" not in url:
        raise ValueError(f"not a URL: the scheme is missing (expected {form})")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [ of an IPv6 host
        raise ValueError(f"the host part is malformed (expected {form})") from None
    if not parts.scheme:
        raise ValueError(f"not a URL: the scheme is missing (expected {form})")
    return parts


def _scheme(url: str, parts: SplitResult, allowed: tuple[str, ...], form: str) -> str:
    scheme = parts.scheme.lower()
    if scheme not in allowed:
        raise ValueError(f"the scheme {parts.scheme!r} is not supported (expected {form})")
    return scheme


def _host_and_port(url: str, parts: SplitResult, form: str, *, host_needed: bool = True) -> None:
    if host_needed and not parts.hostname:
        raise ValueError(f"the host part is missing (expected {form})")
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        port = 0
    else:
        if port is None:
            return
    if not 1 <= port <= 65535:
        shown = _shown(url, parts.netloc.rpartition(":")[2])
        raise ValueError(f"the port part{shown} is not a port number, 1-65535 (expected {form})")


def _number(url: str, what: str, value: str, form: str) -> int:
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"the {what}{_shown(url, value)} is not a number (expected {form})")
    return int(value)


def redis_database(url: str) -> int:
    """The database number a Redis URL names (0 when it names none); :class:`ValueError`
    naming the part when the URL is malformed."""
    parts = _split(url, REDIS_FORM)
    scheme = _scheme(url, parts, REDIS_SCHEMES, REDIS_FORM)
    query = parse_qs(parts.query, keep_blank_values=True)
    numbers = [_number(url, "database part (?db=)", v, REDIS_FORM) for v in query.get("db", [])]
    if scheme == "unix":
        if not parts.path.strip("/"):
            raise ValueError(f"the socket path is missing (expected {REDIS_FORM})")
        return numbers[-1] if numbers else 0
    _host_and_port(url, parts, REDIS_FORM)
    path = parts.path[1:]  # after the / that ends the host
    if path:
        numbers.append(_number(url, "database part", path, REDIS_FORM))
    if len(set(numbers)) > 1:
        raise ValueError(f"the database part and ?db= name two databases (expected {REDIS_FORM})")
    return numbers[0] if numbers else 0


def check_database_url(url: str) -> None:
    """A PostgreSQL URL names its host (or none: the local socket) and its database; a
    SQLite one its file."""
    parts = _split(url, DATABASE_FORM)
    scheme = _scheme(url, parts, POSTGRES_SCHEMES + SQLITE_SCHEMES, DATABASE_FORM)
    if scheme in SQLITE_SCHEMES:
        if parts.netloc:
            raise ValueError(
                "a SQLite URL has no host part (expected sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db)"
            )
        if parts.path.lstrip("/") in ("", ":memory:"):
            raise ValueError(
                "the file path is missing (an in-memory SQLite database is not shared "
                f"between connections; expected {DATABASE_FORM})"
            )
        return
    # No host at all is libpq's local socket (postgresql:///db, or ?host=/run/postgresql);
    # a user or a port without a host is a host left out.
    socket = not parts.netloc or "host" in parse_qs(parts.query)
    _host_and_port(url, parts, DATABASE_FORM, host_needed=not socket)
    if not parts.path.strip("/"):
        raise ValueError(f"the database name is missing (expected {DATABASE_FORM})")


def check_http_url(url: str, *, bare_host: bool = False) -> None:
    """The URL of an HTTP server: http or https, a host, a valid port. ``bare_host``
    also takes ``host:port`` without a scheme, which the vector store clients read as
    http."""
    if bare_host and "://" not in url:
        url = f"http://{url}"
    parts = _split(url, HTTP_FORM)
    _scheme(url, parts, HTTP_SCHEMES, HTTP_FORM)
    _host_and_port(url, parts, HTTP_FORM)


def masked(url: str) -> str:
    """``url`` with its password replaced by ``****``, to be shown in a message or log."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The last @ before the path ends the credentials; the password may hold @ or :.
    end = len(rest)
    for stop in "/?#":
        found = rest.find(stop, rest.rfind("@") + 1 if "@" in rest else 0)
        if found != -1:
            end = min(end, found)
    userinfo, at, host = rest[:end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:{MASK}@{host}{rest[end:]}"


def unreachable(service: str, variable: str, url: str, exc: BaseException) -> str:
    """One line for a server that did not answer at start: which, where (password
    masked), why, and what to do."""
    return (
        f"{service} is not reachable at {masked(url)} ({_cause(exc)}): start {service} "
        f"there, or set {variable} to one that runs (`memstack doctor` checks each store)"
    )


def _cause(exc: BaseException) -> str:
    """The shortest true reason: the OS's word for a socket error underneath (refused,
    timed out, unknown host), else the first line of the driver's message."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno)
        seen = seen.__cause__ or seen.__context__
    inner = getattr(exc, "orig", None) or exc  # SQLAlchemy keeps the driver's error here
    lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    return lines[0] if lines else type(inner).__name__
