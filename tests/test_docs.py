"""The README stays true to the code."""

from __future__ import annotations

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
