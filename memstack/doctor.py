"""Health checks behind ``memstack doctor``: reach each store and report its version."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from memstack import db
from memstack.settings import Settings
from memstack.stores import create_redis, redis_info


@dataclass(frozen=True)
class Check:
    store: str
    mode: str
    ok: bool
    detail: str


async def _redis(settings: Settings) -> Check:
    mode = "server" if settings.redis_url else "embedded (fakeredis)"
    redis = create_redis(settings)
    try:
        if not settings.redis_url:
            import fakeredis

            await redis.ping()
            return Check("redis", mode, True, f"fakeredis {fakeredis.__version__}, lost at exit")
        info = await redis_info(redis)
        return Check(
            "redis",
            mode,
            True,
            f"version {info.get('redis_version', '?')} {settings.redis_url or ''}",
        )
    except Exception as exc:
        return Check("redis", mode, False, str(exc))
    finally:
        await redis.aclose()


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
    return [
        await _redis(settings),
        await _database(settings),
        await _vectors(settings, "memory"),
        await _vectors(settings, "kb"),
    ]
