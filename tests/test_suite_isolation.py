"""The test suite keeps to itself: its own Redis database by default, keys under the
run's own prefix deleted when the run ends, and the variables that point it at other
servers documented in the README."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import redis

from memstack.core.urls import redis_database

ROOT = Path(__file__).resolve().parents[1]

# A run of its own, which writes to Redis and cleans nothing up by itself.
LEAVES_KEYS = """
from memstack import AsyncMemory


async def test_writes_and_leaves(service_settings):
    mem = await AsyncMemory.open(service_settings)
    await mem.remember("u1", "s1", "user", "I live in Lisbon.")
    await mem.close()
    print("PREFIX=" + service_settings.key_prefix)
"""


def _without_test_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "MEMSTACK_TEST_REDIS_URL"}


def test_the_default_redis_is_a_database_of_its_own() -> None:
    probe = "from tests.conftest import REDIS_URL; print(REDIS_URL)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=_without_test_variables(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert redis_database(done.stdout.strip()) != 0


def test_a_run_deletes_the_keys_it_wrote(tmp_path: Path, redis_url: str, pg_url: str) -> None:
    test = tmp_path / "test_leaves_keys.py"
    test.write_text(LEAVES_KEYS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-c",
            "pyproject.toml",
            "-p",
            "tests.conftest",
            str(test),
        ],
        cwd=ROOT,
        env={**os.environ, "MEMSTACK_TEST_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [prefix] = re.findall(r"PREFIX=(\S+)", done.stdout)
    client = redis.Redis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"{prefix}:*", count=1000)) == []
    finally:
        client.close()


def test_the_readme_documents_every_variable_the_suite_reads() -> None:
    conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    read = set(re.findall(r'os\.environ\.get\(\s*"(MEMSTACK_[A-Z_]+)"', conftest))
    assert {"MEMSTACK_TEST_REDIS_URL", "MEMSTACK_TEST_PG_URL"} <= read
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tests_section = readme[: readme.index("## Modes")]
    for variable in read:
        assert f"| `{variable}` |" in tests_section, variable
    assert "`redis://127.0.0.1:6379/15`" in tests_section
