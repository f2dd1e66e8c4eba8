"""The synchronous twins are generated from their async originals (scripts/gen_sync.py:
Memory's forwarders from AsyncMemory, the blocking HTTP client from the async one), so
what keeps them alike is that the generated files are current; and the public API is
importable from the package root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import memstack

ROOT = Path(__file__).resolve().parent.parent


def test_the_generated_sync_twins_are_current() -> None:
    run = subprocess.run(
        [sys.executable, "scripts/gen_sync.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr


def test_the_public_api_is_importable_from_the_package_root() -> None:
    for name in memstack.__all__:
        assert getattr(memstack, name) is not None
    assert issubclass(memstack.StoreUnavailable, memstack.MemstackError)
    assert issubclass(memstack.ValidationError, memstack.MemstackError)
