"""The HTTP client stays thin: importing it loads none of the store or model stacks."""

from __future__ import annotations

import json
import subprocess
import sys

# What a program that only talks to a memstack server must not pay for.
HEAVY = ("redis", "sqlalchemy", "alembic", "openai", "numpy", "chromadb", "torch", "qdrant_client")


def _loaded_after(statement: str) -> set[str]:
    """The top-level packages in sys.modules after ``statement``, in a fresh process."""
    code = f"{statement}; import json, sys; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return {name.partition(".")[0] for name in json.loads(result.stdout)}


def test_client_imports_no_store_or_model_stack() -> None:
    loaded = _loaded_after("import memstack.client")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_client_answers_are_the_public_types() -> None:
    # The client builds the same classes the library returns, from their one home.
    loaded = _loaded_after(
        "import memstack.client, memstack; "
        "assert memstack.ContextResult.__module__ == 'memstack.types'; "
        "assert memstack.StoredFact.__module__ == 'memstack.types'"
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
