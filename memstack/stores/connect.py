"""Opening the Redis and SQL connections from settings; nothing connects at import."""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster

from memstack.core.errors import StoreUnavailable
from memstack.core.settings import Settings
from memstack.core.urls import unreachable
from memstack.stores.redis.errors import REDIS_ERRORS

_fake_server: Any = None


def create_redis(settings: Settings) -> Redis:
    """A redis-py asyncio client, or fakeredis in-process when no URL is configured.

    Every embedded client in one process shares one fake server, so an API object and
    an in-process worker see the same data.
    """
    if settings.redis_url and settings.redis_cluster:
        return _cluster(settings.redis_url, settings)
    if settings.redis_url:
        # A blocking pool: a call past max_connections waits for a free connection (up to
        # store_timeout_s) instead of failing with "Too many connections".
        pool = BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=settings.redis_max_connections,
            timeout=settings.store_timeout_s,
            socket_timeout=settings.store_timeout_s,
            socket_connect_timeout=settings.store_timeout_s,
        )
        return Redis.from_pool(pool)  # owns the pool: aclose() closes it
    import fakeredis

    global _fake_server
    if _fake_server is None:
        _fake_server = fakeredis.FakeServer()
    return fakeredis.FakeAsyncRedis(server=_fake_server)


def _cluster(url: str, settings: Settings) -> Redis:
    """A cluster client that learns the other nodes from the one ``url`` names.

    Typed as :class:`Redis`: the cluster client answers every command memstack sends
    with the same signature (scripts, pipelines within one slot, SCAN of every primary),
    and one static type keeps the union out of every layer above.
    """
    client = RedisCluster.from_url(
        url,
        # Per node; past it a call fails (the cluster client has no blocking pool).
        max_connections=settings.redis_max_connections,
        socket_timeout=settings.store_timeout_s,
        socket_connect_timeout=settings.store_timeout_s,
    )
    return cast(Redis, client)


async def reach(redis: Redis, settings: Settings) -> None:
    """One PING at start; a server that does not answer is :class:`StoreUnavailable`
    naming it (password masked) and the fix, not the driver's traceback."""
    try:
        await redis.ping()
    except Exception as exc:
        url = settings.redis_url or "the embedded Redis"
        raise StoreUnavailable(
            unreachable("Redis", "MEMSTACK_REDIS_URL", url, exc), layer="redis"
        ) from exc


async def redis_info(redis: Redis) -> dict[str, Any]:
    try:
        info: dict[str, Any] = await redis.info("server")
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis unreachable: {exc}", layer="redis") from exc
    return info
