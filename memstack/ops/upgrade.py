"""`memstack db upgrade`: the SQL schema to a revision, a Redis server's keys to the
current layout."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from memstack.core.settings import Settings
from memstack.stores.connect import create_redis, reach
from memstack.stores.redis import layout as redis_layout
from memstack.stores.redis.keys import keys_for
from memstack.stores.sql import db


@dataclass(frozen=True)
class UpgradeReport:
    revision: str | None
    redis_layout: str
    redis_keys_moved: int | None  # None: no Redis server configured (embedded)


def upgrade(settings: Settings, revision: str = "head") -> UpgradeReport:
    """Run the migrations up to ``revision``, then move Redis keys of older layouts."""
    db.upgrade(settings, revision)
    moved = asyncio.run(_upgrade_redis(settings)) if settings.redis_url else None
    return UpgradeReport(
        revision=db.head_revision() if revision == "head" else revision,
        redis_layout=keys_for(settings).layout_mark(),
        redis_keys_moved=moved,
    )


async def _upgrade_redis(settings: Settings) -> int:
    redis = create_redis(settings)
    try:
        await reach(redis, settings)
        return await redis_layout.upgrade(redis, keys_for(settings))
    finally:
        await redis.aclose()
