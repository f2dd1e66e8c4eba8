"""The README stays true to the code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from memstack.core.settings import settings_table

ROOT = Path(__file__).resolve().parents[1]


def test_readme_configuration_table_matches_settings() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- settings:start -->") + len("<!-- settings:start -->")
    end = readme.index("<!-- settings:end -->")
    assert readme[start:end].strip() == settings_table(), (
        "README configuration table is stale: regenerate it with `memstack config --markdown`"
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


def _readme_example(heading: str) -> str:
    """The first Python block of the README after ``heading``."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index(heading) :]
    start = section.index("```python") + len("```python")
    return section[start : section.index("```\n", start)]


def _run_embedded(code: str, tmp_path: Path) -> str:
    """``code`` in a fresh process on the embedded default; its standard output."""
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
    return result.stdout


def test_readme_python_example_runs(tmp_path: Path) -> None:
    out = _run_embedded(_readme_example("## Using it"), tmp_path)
    assert "'amount': 8000" in out
    assert "预算上限：8000 CNY" in out
    assert "5000" not in out.split("预算上限")[1]


def test_readme_langgraph_example_remembers_across_threads(tmp_path: Path) -> None:
    out = _run_embedded(_readme_example("### LangGraph"), tmp_path)
    assert out.splitlines() == ["noted", "Ana lives in Porto"]


def test_readme_llama_index_example_brings_memory_to_the_llm(tmp_path: Path) -> None:
    out = _run_embedded(_readme_example("### LlamaIndex"), tmp_path)
    reply, roles = out.rstrip("\n").rsplit("\n", 1)
    assert "8000" in reply  # the fact from session s1 reached the (echoing) mock LLM
    assert roles == "['user', 'assistant']"


def _key_table() -> dict[str, tuple[str, set[str]]]:
    """docs/facts.md's canonical keys: {key: (type, synonyms)}."""
    doc = (ROOT / "docs" / "facts.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Canonical keys") :]
    section = section[: section.index("\n## ", 3)]
    rows: dict[str, tuple[str, set[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        synonyms: set[str] = set()
        for group in cells[4].split(";"):
            # "relation keys: wife, husband" lists synonyms under a heading
            words = group.split(":", 1)[1] if "keys:" in group else group
            synonyms.update(w.strip() for w in words.split(",") if w.strip())
        rows[cells[0].strip("`")] = (cells[1], synonyms)
    return rows


def test_facts_doc_key_table_matches_the_vocabulary() -> None:
    from memstack.core.facts.vocabulary import VOCABULARY

    table = _key_table()
    assert list(table) == list(VOCABULARY), "docs/facts.md key table != VOCABULARY keys"
    for key, spec in VOCABULARY.items():
        doc_type, doc_synonyms = table[key]
        assert doc_type == spec.type, f"{key}: documented as {doc_type}, is {spec.type}"
        assert doc_synonyms == set(spec.synonyms), (
            f"{key}: synonyms differ; only in the docs {sorted(doc_synonyms - set(spec.synonyms))},"
            f" only in the code {sorted(set(spec.synonyms) - doc_synonyms)}"
        )
