"""Health checks behind ``memstack doctor``: reach each store and report its version."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy import text

from memstack import db, home
from memstack.settings import Settings
from memstack.stores import create_redis, redis_info


@dataclass(frozen=True)
class Check:
    store: str
    mode: str
    ok: bool
    detail: str
    # What the status column says: "ok", "down", or "unsafe" (reachable, but set up to
    # lose data).
    status: str = ""

    @property
    def label(self) -> str:
        return self.status or ("ok" if self.ok else "down")


# What to do about a Redis that keeps nothing on disk (docs/reliability.md).
PERSISTENCE_FIX = (
    "turn on the append-only file: `CONFIG SET appendonly yes`, `CONFIG SET appendfsync "
    "everysec` and `CONFIG REWRITE` (or the same in redis.conf); see the README, Production"
)


async def _persistence(redis: Redis) -> tuple[bool, str]:
    """Whether Redis keeps accepted messages through a restart, and how."""
    try:
        config = await redis.config_get("appendonly")
        config.update(await redis.config_get("appendfsync"))
        config.update(await redis.config_get("save"))
        aof = _text(config.get("appendonly", "")) == "yes"
        fsync = _text(config.get("appendfsync", ""))
        save = _text(config.get("save", "")).strip()
    except RedisError:
        # CONFIG may be renamed away (managed services); INFO still tells about the AOF.
        info = await redis.info("persistence")
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


async def _redis(settings: Settings) -> Check:
    mode = "server" if settings.redis_url else "embedded (fakeredis)"
    redis = create_redis(settings)
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
        safe, persistence = await _persistence(redis)
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
    engine = db.create_engine(settings)
    try:
        async with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                version = str(await conn.scalar(text("SHOW server_version")))
            else:
                version = "SQLite " + str(await conn.scalar(text("SELECT sqlite_version()")))
        current = await db.current_revision(engine)
        head = db.head_revision()
        if current == head:
            schema = "schema at head"
        else:
            # With auto-migration (the embedded default) the first Memory() upgrades it.
            todo = (
                "migrated on first use" if settings.should_migrate else "run `memstack db upgrade`"
            )
            schema = f"schema {current or 'not created'} ({todo})"
        return Check("database", mode, True, f"{version}; {schema}")
    except Exception as exc:
        return Check("database", mode, False, str(exc).splitlines()[0])
    finally:
        await engine.dispose()


async def _vectors(settings: Settings, which: str) -> Check:
    from memstack.embedders import build_embedder
    from memstack.vectorstores.chroma import ChromaStore
    from memstack.vectorstores.factory import build_kb_store, build_memory_store

    kind, url = (
        (settings.vector_store, settings.vector_url)
        if which == "memory"
        else (settings.kb_store, settings.kb_url)
    )
    mode = f"{kind} " + ("server" if url else "embedded")
    name = "vectors" if which == "memory" else "knowledge base"
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
        return Check(
            name, mode, True, f"{count} vectors, {embedder.model_version}, {where}{layout}"
        )
    except Exception as exc:
        return Check(name, mode, False, str(exc).splitlines()[0])


async def run_checks(settings: Settings) -> list[Check]:
    checks = [await _redis(settings), await _database(settings)]
    # Opening an embedded vector store another process holds would disturb it (or be
    # refused): say who holds the home instead.
    holder = home.holder(settings.home)
    for which, url in (("memory", settings.vector_url), ("kb", settings.kb_url)):
        if holder is not None and not url:
            name = "vectors" if which == "memory" else "knowledge base"
            kind = settings.vector_store if which == "memory" else settings.kb_store
            detail = f"{settings.home} is in use by {holder}; not opened"
            checks.append(Check(name, f"{kind} embedded", True, detail, "in use"))
        else:
            checks.append(await _vectors(settings, which))
    return checks
