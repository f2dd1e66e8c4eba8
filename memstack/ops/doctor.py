"""Health checks behind ``memstack doctor``: reach each store and report its version,
and whether it is set up to lose or split data. (A malformed server URL never gets this
far: the settings refuse it, core/urls.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError
from sqlalchemy import text

from memstack.core.errors import MemstackError
from memstack.core.settings import Settings
from memstack.stores import home
from memstack.stores.connect import create_redis, redis_info
from memstack.stores.sql import db


@dataclass(frozen=True)
class Check:
    store: str
    mode: str
    ok: bool
    detail: str
    # What the status column says: "ok", "down", "needs upgrade" (a server's schema is
    # not at head), "in use" (an embedded home another process holds), or "unsafe"
    # (reachable, but set up to lose data or to split it between processes).
    status: str = ""

    @property
    def label(self) -> str:
        return self.status or ("ok" if self.ok else "down")


# What to do about a Redis that keeps nothing on disk (docs/reliability.md).
PERSISTENCE_FIX = (
    "turn on the append-only file: `CONFIG SET appendonly yes`, `CONFIG SET appendfsync "
    "everysec` and `CONFIG REWRITE` (or the same in redis.conf); see the README, Production"
)


async def _persistence(redis: Redis, node: Any = None) -> tuple[bool, str]:
    """Whether Redis (or one ``node`` of a cluster) keeps accepted messages through a
    restart, and how."""
    on: dict[str, Any] = {} if node is None else {"target_nodes": node}
    try:
        config = await redis.config_get("appendonly", **on)
        config.update(await redis.config_get("appendfsync", **on))
        config.update(await redis.config_get("save", **on))
        aof = _text(config.get("appendonly", "")) == "yes"
        fsync = _text(config.get("appendfsync", ""))
        save = _text(config.get("save", "")).strip()
    except RedisError:
        # CONFIG may be renamed away (managed services); INFO still tells about the AOF.
        info = await redis.info("persistence", **on)
        aof, fsync, save = bool(info.get("aof_enabled")), "?", "unknown"
    if aof:
        window = {"always": "none", "everysec": "about 1 s"}.get(fsync, "up to the OS")
        return True, f"AOF appendfsync {fsync} (a kill -9 loses {window} of accepted messages)"
    if save:
        return True, (
            f"RDB snapshots only (save {save}): a crash loses what came after the last one; "
            "prefer the AOF"
        )
    return False, (
        "keeps nothing on disk (appendonly no, no save): a restart loses every message "
        f"still queued for ingest; {PERSISTENCE_FIX}"
    )


async def _cluster_persistence(redis: Redis) -> tuple[bool, str]:
    """:func:`_persistence` of every primary: one that keeps nothing loses its slots' jobs."""
    primaries = cast(RedisCluster, redis).get_primaries()
    found = [(f"{n.host}:{n.port}", *(await _persistence(redis, n))) for n in primaries]
    head = f"Redis Cluster of {len(primaries)} primaries"
    unsafe = [(name, why) for name, ok, why in found if not ok]
    if unsafe:
        names = ", ".join(name for name, _why in unsafe)
        return False, f"{head}; {names}: {unsafe[0][1]}"
    return True, f"{head}; {found[0][2] if found else 'no primaries'}"


async def redis_persistence(settings: Settings) -> tuple[bool, str]:
    """Whether the Redis server of ``settings`` (every primary of a cluster) keeps
    accepted messages through a restart, and how; raises when it cannot be reached."""
    redis = create_redis(settings)
    try:
        check = _cluster_persistence if settings.redis_cluster else _persistence
        return await check(redis)
    finally:
        await redis.aclose()


async def _redis(settings: Settings) -> Check:
    mode = "server" if settings.redis_url else "embedded (fakeredis)"
    mode = "cluster" if settings.redis_cluster else mode
    try:
        redis = create_redis(settings)
    except ValueError as exc:  # a malformed MEMSTACK_REDIS_URL
        return Check("redis", mode, False, f"MEMSTACK_REDIS_URL: {exc}")
    try:
        if not settings.redis_url:
            import fakeredis

            await redis.ping()
            journal = settings.home / "journal.db"
            return Check(
                "redis",
                mode,
                True,
                f"fakeredis {fakeredis.__version__} in the process; accepted messages are "
                f"journaled in {journal} until ingested",
            )
        info = await redis_info(redis)
        check = _cluster_persistence if settings.redis_cluster else _persistence
        safe, persistence = await check(redis)
        return Check(
            "redis",
            mode,
            safe,
            f"version {info.get('redis_version', '?')} {settings.redis_url}; {persistence}",
            "" if safe else "unsafe",
        )
    except Exception as exc:
        return Check("redis", mode, False, str(exc))
    finally:
        await redis.aclose()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _database(settings: Settings) -> Check:
    mode = "server" if settings.database_url else "embedded (SQLite)"
    try:
        engine = db.create_engine(settings)
    except (MemstackError, ValueError) as exc:  # a malformed MEMSTACK_DATABASE_URL
        return Check("database", mode, False, str(exc).splitlines()[0])
    try:
        async with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                version = str(await conn.scalar(text("SHOW server_version")))
            else:
                version = "SQLite " + str(await conn.scalar(text("SELECT sqlite_version()")))
        ok, schema = _schema(settings, await db.current_revision(engine))
        return Check("database", mode, ok, f"{version}; {schema}", "" if ok else "needs upgrade")
    except Exception as exc:
        return Check("database", mode, False, str(exc).splitlines()[0])
    finally:
        await engine.dispose()


def _schema(settings: Settings, current: str | None) -> tuple[bool, str]:
    """Whether a process can start on a schema at ``current``, and what to do if not."""
    head = db.head_revision()
    if current == head:
        return True, "schema at head"
    if current is not None and not _known_revision(current):
        return False, f"schema {current} is newer than this memstack (head {head}): upgrade it"
    if settings.should_migrate:
        # With auto-migration (the embedded default) the first Memory() upgrades it.
        return True, f"schema {current or 'not created'} (migrated on first use)"
    # Servers are never migrated implicitly: the API and workers refuse to start.
    return False, f"schema {current or 'not created'} (run `memstack db upgrade`)"


def _known_revision(revision: str) -> bool:
    from alembic.script import ScriptDirectory

    try:
        script = ScriptDirectory.from_config(db.alembic_config("sqlite://"))
        return script.get_revision(revision) is not None
    except Exception:
        return False


async def _vectors(settings: Settings, which: str) -> tuple[Check, int]:
    """The check of a vector store and how many vectors it holds (0 when unknown)."""
    from memstack.ml.embedders import build_embedder
    from memstack.stores.vectors.chroma import ChromaStore
    from memstack.wiring import build_kb_store, build_memory_store

    kind, url = _store_of(settings, which)
    mode = f"{kind} " + ("server" if url else "embedded")
    name = _name_of(which)
    try:
        embedder = build_embedder(settings)
        build = build_memory_store if which == "memory" else build_kb_store
        store = await build(settings, embedder)
        try:
            count = await store.count()
            # A store written before sharding keeps one collection until `memstack reindex`.
            layout = f", {store.layout}" if isinstance(store, ChromaStore) else ""
        finally:
            await store.close()
        where = url or str(settings.home / kind)
        detail = f"{count} vectors, {embedder.model_version}, {where}{layout}"
        return Check(name, mode, True, detail), count
    except Exception as exc:
        return Check(name, mode, False, str(exc).splitlines()[0]), 0


def _store_of(settings: Settings, which: str) -> tuple[str, str | None]:
    if which == "memory":
        return settings.vector_store, settings.vector_url
    return settings.kb_store, settings.kb_url


def _name_of(which: str) -> str:
    return "vectors" if which == "memory" else "knowledge base"


# --- stores each process of a server deployment would keep for itself ------------------
# With MEMSTACK_REDIS_URL set, several processes (API, workers) share one memory; a store
# left embedded lives in MEMSTACK_HOME, and a relative home is a different folder for
# each working directory: a worker started elsewhere writes where the API never reads.
SERVER_OF = {
    "database": ("MEMSTACK_DATABASE_URL", "a PostgreSQL server"),
    "vectors": ("MEMSTACK_VECTOR_URL", "a Chroma or Qdrant server"),
    "knowledge base": ("MEMSTACK_KB_URL", "a Qdrant or Chroma server"),
}


def per_process(settings: Settings, store: str) -> str | None:
    """Why ``store``, embedded, would not be shared by the processes of a server
    deployment (and the fix), or None when it would be."""
    if settings.embedded_redis or settings.home.is_absolute():
        return None
    variable, server = SERVER_OF[store]
    return (
        f"server mode (MEMSTACK_REDIS_URL) with {variable} unset: each process keeps its "
        f"own {store} in MEMSTACK_HOME {settings.home}, relative to its working directory "
        f"(here {settings.home.resolve()}), so a worker or API started elsewhere uses "
        f"another; set {variable} to {server}, or MEMSTACK_HOME to one absolute folder "
        "(which one process at a time may hold)"
    )


def _unsafe(check: Check, why: str) -> Check:
    # A store that is down (or needs an upgrade) says so first; the reason follows.
    status = "unsafe" if check.ok else check.label
    return Check(check.store, check.mode, False, f"{why}. {check.detail}", status)


async def knowledge_base_exists(settings: Settings, vectors: int) -> bool:
    """Whether this deployment has a knowledge base: documents in the registry (any
    namespace), or vectors in the store this process sees."""
    if vectors > 0:
        return True
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from memstack.knowledge.base import registry_collection, registry_has_documents

    try:
        engine = db.create_engine(settings)
    except (MemstackError, ValueError):
        return False
    try:
        sessions = async_sessionmaker(engine)
        collection = registry_collection(settings)
        return await registry_has_documents(sessions, collection, namespace=None)
    except Exception:  # no schema yet, or the database is down (its own check says so)
        return False
    finally:
        await engine.dispose()


async def _store_check(settings: Settings, which: str, holder: str | None) -> Check:
    kind, url = _store_of(settings, which)
    name = _name_of(which)
    if holder is not None and not url:
        # Opening an embedded vector store another process holds would disturb it (or
        # be refused): say who holds the home instead.
        detail = f"{settings.home} is in use by {holder}; not opened"
        check, count = Check(name, f"{kind} embedded", True, detail, "in use"), 0
    else:
        check, count = await _vectors(settings, which)
    why = None if url else per_process(settings, name)
    if why and (which == "memory" or await knowledge_base_exists(settings, count)):
        return _unsafe(check, why)
    return check


async def _settled(settings: Settings) -> Settings:
    """The settings on the deployment's embedder (see ``wiring.settle_embedder``), read
    without writing; as they are when the database cannot say (its own check tells)."""
    from memstack.wiring import settle_embedder

    if settings.embedder != "auto":
        return settings
    try:
        engine = db.create_engine(settings)
    except (MemstackError, ValueError):
        return settings
    try:
        return await settle_embedder(settings, engine, record=False)
    except Exception:  # no schema yet, or the database is down
        return settings
    finally:
        await engine.dispose()


async def run_checks(settings: Settings) -> list[Check]:
    checks = [await _redis(settings), await _database(settings)]
    settings = await _settled(settings)
    if not settings.database_url and (why := per_process(settings, "database")):
        checks[1] = _unsafe(checks[1], why)
    holder = home.holder(settings.home)
    for which in ("memory", "kb"):
        checks.append(await _store_check(settings, which, holder))
    return checks
