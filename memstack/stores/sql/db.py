"""Database engine, URL handling and Alembic migrations for fact memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from memstack.core.errors import (
    ConfigError,
    MemstackError,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
)
from memstack.core.settings import Settings
from memstack.core.urls import unreachable

MIGRATIONS = Path(__file__).with_name("migrations")


def dialect_insert(session: AsyncSession, table: type[object]):  # type: ignore[no-untyped-def]
    """``INSERT`` of the session's dialect, which offers ``on_conflict_do_nothing``."""
    name = session.get_bind().dialect.name
    return (pg_insert if name == "postgresql" else sqlite_insert)(table)


@asynccontextmanager
async def guarded(what: str) -> AsyncIterator[None]:
    """Turn SQLAlchemy errors into ours: a lost or refused connection is
    :class:`StoreUnavailable` (the worker then keeps the job pending), anything else
    :class:`StoreError`."""
    try:
        yield
    except MemstackError:
        raise
    # Only the class name goes into the message: a driver's text can carry connection
    # parameters, and messages reach API clients. The chained exception keeps it for logs.
    except (OperationalError, InterfaceError, PoolTimeout, OSError) as exc:
        raise StoreUnavailable(
            f"database unavailable ({what}): {_cause(exc)}", layer="database"
        ) from exc
    except SQLAlchemyError as exc:
        raise StoreError(f"database error ({what}): {_cause(exc)}", layer="database") from exc


def _cause(exc: BaseException) -> str:
    return type(getattr(exc, "orig", None) or exc).__name__


def sync_url(settings: Settings) -> str:
    """The synchronous SQLAlchemy URL (Alembic runs synchronously)."""
    if settings.embedded_database:
        settings.home.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(settings.home / 'memstack.db').resolve()}"
    assert settings.database_url is not None
    try:
        url = make_url(settings.database_url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ConfigError(
            "MEMSTACK_DATABASE_URL is not a database URL "
            "(expected postgresql://user@host:5432/db or sqlite:///path)"
        ) from None
    if url.drivername in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+asyncpg"):
        url = url.set(drivername="postgresql+psycopg")
    elif url.drivername == "sqlite+aiosqlite":
        url = url.set(drivername="sqlite")
    elif url.drivername not in ("postgresql+psycopg", "sqlite"):
        raise ConfigError(
            f"MEMSTACK_DATABASE_URL: driver {url.drivername!r} is not supported "
            "(use postgresql://… or sqlite:///…)"
        )
    return url.render_as_string(hide_password=False)


def async_url(settings: Settings) -> str:
    url = make_url(sync_url(settings))
    if url.drivername == "sqlite":
        url = url.set(drivername="sqlite+aiosqlite")
    return url.render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    # WAL lets the API and the in-process worker read while one writes.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def create_engine(settings: Settings) -> AsyncEngine:
    url = async_url(settings)
    if url.startswith("sqlite"):
        engine = create_async_engine(url)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    # Past pool_size + max_overflow a call waits for a connection (back-pressure) rather
    # than failing at once.
    return create_async_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_pool_size,
        pool_timeout=settings.store_timeout_s,
        pool_pre_ping=True,
    )


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(settings: Settings, revision: str = "head") -> None:
    """``memstack db upgrade``: bring the schema to ``revision``."""
    try:
        command.upgrade(alembic_config(sync_url(settings)), revision)
    except (OperationalError, InterfaceError) as exc:
        raise unavailable(settings, exc) from exc
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"database: {exc}", layer="database") from exc


def unavailable(settings: Settings, exc: BaseException) -> StoreUnavailable:
    """The database did not answer: one line naming it (password masked) and the fix."""
    if settings.database_url:
        service = "SQLite" if settings.database_url.startswith("sqlite") else "PostgreSQL"
        url = settings.database_url
    else:
        service, url = "SQLite", sync_url(settings)
    return StoreUnavailable(
        unreachable(service, "MEMSTACK_DATABASE_URL", url, exc), layer="database"
    )


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


async def current_revision(engine: AsyncEngine) -> str | None:
    def read(conn: Connection) -> str | None:
        return MigrationContext.configure(conn).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def prepare(engine: AsyncEngine, settings: Settings) -> None:
    """Migrate (embedded default) or check that the schema is at head (servers)."""
    try:
        if settings.should_migrate:
            await asyncio.to_thread(upgrade, settings)
            async with AsyncSession(engine) as session, session.begin():
                await refresh_statistics(session)
            return
        current = await current_revision(engine)
    except (OperationalError, InterfaceError, OSError) as exc:
        raise unavailable(settings, exc) from exc
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"database unreachable: {exc}", layer="database") from exc
    head = head_revision()
    if current != head:
        raise SchemaMismatch(
            f"database schema is at {current or 'nothing'}, this memstack needs {head}: "
            "run `memstack db upgrade` (or set MEMSTACK_AUTO_MIGRATE=true)",
            layer="database",
        )


# Rows ANALYZE samples per index on SQLite: enough for the planner to tell a unique
# key from a column shared by a user's whole history, at a cost that stays small
# however large the file grows.
SQLITE_ANALYSIS_LIMIT = 1000


async def refresh_statistics(session: AsyncSession) -> None:
    """Give SQLite's planner the statistics PostgreSQL's autovacuum keeps. Without them
    it takes ``user_id = ?`` for as selective as ``msg_id IN (…)`` and walks a heavy
    user's whole history to find a few rows by id. A no-op on PostgreSQL."""
    if session.get_bind().dialect.name != "sqlite":
        return
    await session.execute(text(f"PRAGMA analysis_limit={SQLITE_ANALYSIS_LIMIT}"))
    await session.execute(text("ANALYZE"))


async def ping(engine: AsyncEngine) -> None:
    """One round trip to the database (``SELECT 1``); raises what the driver raises."""
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
