"""The layout of memstack's Redis keys, checked at start and upgraded on demand.

Session keys were once tagged by the session id alone (``agent:session:{s1}:window``),
which let another user's write take over a session whose keys had expired. They are
now tagged by user and session (``{alice/s1}``, :mod:`memstack.stores.redis.keys`). A Redis holding
old keys is upgraded by ``memstack db upgrade`` (servers) or at start (the embedded
default): each old key moves under its owner's tag with its TTL, the owner read from
the session's state or window; keys whose owner nothing records (a lock, a cache, an
idempotency mark outliving its session) are dropped, as their TTLs would have soon.
The layout mark (``agent:layout``) makes the check at start one GET. On a Redis
Cluster it records the shard count instead (:mod:`memstack.stores.redis.keys`).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from memstack.core.errors import SchemaMismatch, StoreUnavailable
from memstack.stores.redis.errors import REDIS_ERRORS
from memstack.stores.redis.keys import LAYOUT_VERSION, Keys, session_tag

log = logging.getLogger("memstack.redis")


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


async def _legacy_sessions(redis: Redis, keys: Keys) -> dict[str, list[str]]:
    """Old-layout key names by session id."""
    found: dict[str, list[str]] = defaultdict(list)
    head = f"{keys.prefix}:session:{{"
    async for raw in redis.scan_iter(match=f"{head}*", count=1000):
        name = _text(raw)
        tag = name[len(head) :].split("}", 1)[0]
        if "/" not in tag:
            found[tag].append(name)
    return found


async def _owner(redis: Redis, keys: Keys, session_id: str) -> str | None:
    old_state = f"{keys.prefix}:session:{{{session_id}}}:state"
    old_window = f"{keys.prefix}:session:{{{session_id}}}:window"
    owner = await redis.hget(old_state, "_user_id")
    if owner is not None:
        return _text(owner)
    first = await redis.lindex(old_window, 0)
    if first is None:
        return None
    try:
        return str(json.loads(first)["user_id"])
    except (ValueError, KeyError, TypeError):
        return None


async def _move(redis: Redis, source: str, target: str) -> None:
    """Copy ``source`` to ``target`` with its TTL, then delete it. DUMP/RESTORE rather
    than RENAME: the two names hash to different Redis Cluster slots."""
    payload = await redis.dump(source)
    if payload is not None:
        ttl_ms = max(int(await redis.pttl(source)), 0)
        try:
            await redis.restore(target, ttl_ms, payload)
        except ResponseError as exc:
            # A key written under the new layout already: it is newer, keep it.
            if "BUSYKEY" not in str(exc):
                raise
    await redis.delete(source)


async def _check_cluster(redis: Redis, keys: Keys) -> None:
    """A cluster never held the old layouts (the write script could not run on one), so
    its only check is the shard count: the mark is set by the first process, and a
    process set to another count is refused (its keys would be looked for elsewhere)."""
    want = keys.layout_mark()
    try:
        if await redis.set(keys.layout(), want, nx=True):
            return
        held = _text(await redis.get(keys.layout()) or b"")
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
    if held != want:
        raise SchemaMismatch(
            f"Redis Cluster holds memstack keys in layout {held!r} under prefix "
            f"{keys.prefix!r}, this process expects {want!r}: set MEMSTACK_INGEST_SHARDS back "
            "to the count the data was written with (changing it is not supported)",
            layer="redis",
        )


async def upgrade(redis: Redis, keys: Keys) -> int:
    """Move every old-layout session key under its owner's tag; returns how many moved.
    On a cluster there is nothing to move: the shard count is checked and recorded."""
    if keys.shards is not None:
        await _check_cluster(redis, keys)
        return 0
    moved = 0
    try:
        for session_id, names in (await _legacy_sessions(redis, keys)).items():
            owner = await _owner(redis, keys, session_id)
            if owner is None:
                await redis.delete(*names)
                continue
            old_tag, new_tag = f"{{{session_id}}}", f"{{{session_tag(owner, session_id)}}}"
            for name in names:
                # An idempotency mark was named by the stored id ("<session>:<id>"); it
                # is now named by the caller's own id, as the write script looks it up.
                target = name.replace(old_tag, new_tag, 1).replace(
                    f":idem:{session_id}:", ":idem:", 1
                )
                await _move(redis, name, target)
                moved += 1
        await redis.set(keys.layout(), LAYOUT_VERSION)
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
    if moved:
        log.info("moved %d Redis keys to the user-scoped session layout", moved)
    return moved


async def check(redis: Redis, keys: Keys, *, migrate: bool) -> None:
    """Make sure Redis holds the current layout: upgrade it when ``migrate``, else raise
    :class:`SchemaMismatch` naming the command (as the SQL schema check does)."""
    if keys.shards is not None:
        await _check_cluster(redis, keys)
        return
    try:
        if _text(await redis.get(keys.layout()) or b"") == LAYOUT_VERSION:
            return
        legacy = await _legacy_sessions(redis, keys)
        if not legacy:
            await redis.set(keys.layout(), LAYOUT_VERSION)
            return
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
    if migrate:
        await upgrade(redis, keys)
        return
    raise SchemaMismatch(
        f"Redis holds {len(legacy)} session(s) in the old key layout (sessions not yet "
        "scoped by user): run `memstack db upgrade`",
        layer="redis",
    )
