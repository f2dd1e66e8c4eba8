"""The README stays true to the code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from memstack.settings import settings_table

ROOT = Path(__file__).resolve().parents[1]


def test_readme_configuration_table_matches_settings() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- settings:start -->") + len("<!-- settings:start -->")
    end = readme.index("<!-- settings:end -->")
    assert readme[start:end].strip() == settings_table(), (
        "README configuration table is stale: regenerate it with `memstack config`"
    )


def test_readme_names_the_three_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/setup.sh" in readme
    assert ".venv/bin/memstack demo" in readme
    assert "MEMSTACK_REQUIRE_SERVICES=1 .venv/bin/python -m pytest -q" in readme
    assert (
        "MEMSTACK_REQUIRE_SERVICES=1 .venv/bin/python -m pytest -q"
        in (ROOT / ".ci/run").read_text()
    )


def test_readme_python_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Using it") :]
    code = section[section.index("```python") + len("```python") : section.index("```\n", 10)]
    env = {
        **os.environ,
        "MEMSTACK_HOME": str(tmp_path / "home"),
        "MEMSTACK_EMBEDDER": "hashing",
    }
    for key in ("MEMSTACK_REDIS_URL", "MEMSTACK_DATABASE_URL", "MEMSTACK_VECTOR_URL"):
        env.pop(key, None)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "'amount': 8000" in result.stdout
    assert "预算上限：8000 CNY" in result.stdout
    assert "5000" not in result.stdout.split("预算上限")[1]
