"""Shared fixtures: the real Redis and PostgreSQL of this machine, and the embedded mode.

With ``MEMSTACK_REQUIRE_SERVICES=1`` (CI) an unreachable Redis or PostgreSQL fails the
run instead of skipping the tests that need it. ``MEMSTACK_TEST_REDIS_URL`` and
``MEMSTACK_TEST_PG_URL`` point the suite at other servers (README, Tests).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

# The CLI's rich consoles are made at import and keep the width COLUMNS had then (a
# pytest-xdist worker has one of 80): wide enough for any table of a test's temporary
# paths, whichever worker and order runs it.
os.environ["COLUMNS"] = "400"

import psycopg
import pytest
import redis

from memstack.core.settings import Settings, load_settings
from memstack.memory import AsyncMemory
from memstack.stores.sql import db

if TYPE_CHECKING:
    from tests.cluster import LocalCluster

# Database 15, not the 0 an application uses by default: the suite never reads or
# writes the keys of a memstack (or anything else) running on the same Redis.
REDIS_URL = os.environ.get("MEMSTACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
PG_ADMIN_URL = os.environ.get(
    "MEMSTACK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRE = os.environ.get("MEMSTACK_REQUIRE_SERVICES", "") not in ("", "0", "false")
# Every key prefix of this run starts with this, so the run can delete what it wrote
# (and only that: two runs on one Redis each have their own).
RUN_PREFIX = f"t{uuid.uuid4().hex[:6]}"


def new_prefix() -> str:
    """A Redis key prefix of its own for one test, deleted with the run's keys."""
    return f"{RUN_PREFIX}{uuid.uuid4().hex[:8]}"


def _unavailable(what: str, exc: Exception) -> None:
    msg = f"{what} is not reachable: {exc}"
    if REQUIRE:
        pytest.fail(f"{msg} (MEMSTACK_REQUIRE_SERVICES is set)", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        _unavailable(f"Redis at {REDIS_URL}", exc)
    return REDIS_URL


@pytest.fixture(scope="session", autouse=True)
def _delete_the_runs_redis_keys() -> Iterator[None]:
    """At the end of the run, every key it left in the suite's Redis (a test that
    failed half-way, a subprocess killed before it cleaned up)."""
    yield
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        keys = list(client.scan_iter(match=f"{RUN_PREFIX}*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
        client.close()
    except redis.RedisError:
        pass  # no Redis (the embedded tests only): nothing was written there


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A Redis Cluster of three masters of its own (tests/cluster.py), for this run.
    It needs only redis-server, so a cluster that cannot start fails the test."""
    from tests.cluster import LocalCluster

    try:
        cluster = LocalCluster().start()
    except Exception as exc:
        # Nodes that did start are closed at exit by the harness that tracks them.
        pytest.fail(f"could not start a local Redis Cluster: {exc}", pytrace=False)
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database for this test run, migrated to head, dropped afterwards."""
    name = f"memstack_test_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        _unavailable(f"PostgreSQL at {PG_ADMIN_URL}", exc)
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    url = f"{base}/{name}"
    db.upgrade(load_settings(database_url=url))
    yield url
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    base: dict[str, object] = {
        "home": tmp_path / "home",
        "key_prefix": new_prefix(),
        "embedder": "hashing",
    }
    base.update(overrides)
    return load_settings(**base)


@pytest.fixture
def service_settings(tmp_path: Path, redis_url: str, pg_url: str) -> Settings:
    return make_settings(tmp_path, redis_url=redis_url, database_url=pg_url, auto_migrate=False)


@pytest.fixture
def embedded_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture(params=["services", "embedded"])
def any_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "services":
        return make_settings(
            tmp_path,
            redis_url=request.getfixturevalue("redis_url"),
            database_url=request.getfixturevalue("pg_url"),
            auto_migrate=False,
        )
    return make_settings(tmp_path)


async def _cleanup(mem: AsyncMemory) -> None:
    r = mem.working.redis
    keys = [k async for k in r.scan_iter(match=mem.working.keys.pattern(), count=1000)]
    if keys:
        await r.delete(*keys)


@pytest.fixture
async def mem(any_settings: Settings) -> AsyncIterator[AsyncMemory]:
    m = await AsyncMemory.open(any_settings)
    yield m
    await _cleanup(m)
    await m.close()


@pytest.fixture
async def service_mem(service_settings: Settings) -> AsyncIterator[AsyncMemory]:
    m = await AsyncMemory.open(service_settings)
    yield m
    await _cleanup(m)
    await m.close()


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"
