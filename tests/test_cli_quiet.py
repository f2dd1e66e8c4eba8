"""The command line when something is wrong, run as a user runs it (a subprocess): a
store that is down at start is one ``error:`` line naming it, its URL (password masked)
and the fix, and a non-zero exit; ``--debug`` adds the traceback; MCP's stderr stays
quiet; and ``memstack --help`` imports none of the heavy stacks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

MEMSTACK = Path(sys.executable).parent / "memstack"
SECRET = "s3cretpw"


def _free_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """This process's environment without MEMSTACK_* settings, a home of its own, and a
    narrow terminal (a long line must not be wrapped into two)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    env.update(MEMSTACK_HOME=str(tmp_path / "home"), MEMSTACK_EMBEDDER="hashing", COLUMNS="60")
    env.update(MEMSTACK_STORE_TIMEOUT_S="2")
    env.update(variables)
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MEMSTACK), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _commands() -> list[list[str]]:
    return [
        ["users"],
        ["facts", "u1"],
        ["status"],
        ["db", "upgrade"],
        ["worker"],
        ["serve", "--port", str(_free_port())],
        ["mcp"],
    ]


@pytest.mark.parametrize("args", _commands(), ids=lambda a: a[0])
def test_redis_down_at_start_is_one_line(tmp_path: Path, args: list[str]) -> None:
    port = _free_port()
    url = f"redis://:{SECRET}@127.0.0.1:{port}/0"
    done = _run(args, _env(tmp_path, MEMSTACK_REDIS_URL=url))
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: Redis is not reachable at redis://:****@127.0.0.1:{port}/0 ")
    assert "start Redis there, or set MEMSTACK_REDIS_URL" in line
    assert SECRET not in done.stderr


@pytest.mark.parametrize("args", [["users"], ["serve"], ["mcp"], ["db", "upgrade"]], ids=str)
def test_postgresql_down_at_start_is_one_line(tmp_path: Path, args: list[str]) -> None:
    port = _free_port()
    url = f"postgresql://memstack:{SECRET}@127.0.0.1:{port}/memstack"
    if args == ["serve"]:
        args = ["serve", "--port", str(_free_port())]
    done = _run(args, _env(tmp_path, MEMSTACK_DATABASE_URL=url))
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"error: PostgreSQL is not reachable at postgresql://memstack:****@127.0.0.1:{port}/memstack"
    )
    assert "Connection refused" in line and "MEMSTACK_DATABASE_URL" in line
    assert SECRET not in done.stderr


@pytest.mark.parametrize(
    ("args", "variables"),
    [(["--debug", "users"], {}), (["users"], {"MEMSTACK_DEBUG": "1"})],
    ids=["option", "variable"],
)
def test_debug_shows_the_traceback_above_the_line(
    tmp_path: Path, args: list[str], variables: dict[str, str]
) -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"
    done = _run(args, _env(tmp_path, MEMSTACK_REDIS_URL=url, **variables))
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert "StoreUnavailable" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("error: Redis is not reachable at")


def test_a_malformed_url_is_one_line_from_the_shell(tmp_path: Path) -> None:
    done = _run(["users"], _env(tmp_path, MEMSTACK_REDIS_URL="redis://127.0.0.1:6379/abc"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: MEMSTACK_REDIS_URL: the database part 'abc' is not a number (expected "
        "redis://[:password@]host:6379/0, rediss://… or unix:///path/redis.sock?db=0)"
    ]


def test_usage_mistakes_share_the_error_style(tmp_path: Path) -> None:
    done = _run(["users", "--no-such-option"], _env(tmp_path))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "error: No such option: --no-such-option"
    assert "Error" not in done.stderr and "╭" not in done.stderr
    missing = _run(["messages"], _env(tmp_path))
    assert missing.returncode == 2
    assert missing.stderr.splitlines()[-1].startswith("error: Missing argument")


def test_an_unknown_variable_is_one_warning_line(tmp_path: Path) -> None:
    done = _run(["db", "upgrade"], _env(tmp_path, MEMSTACK_WINDOW_TURN="5"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "warning: MEMSTACK_WINDOW_TURN (env) is ignored: no setting reads it; "
        "did you mean MEMSTACK_WINDOW_TURNS?"
    ]


async def test_mcp_stderr_is_quiet(tmp_path: Path) -> None:
    """A fresh embedded home: the server migrates SQLite and serves tool calls, and
    writes nothing to stderr (no migration or request lines in the client's log)."""
    params = StdioServerParameters(command=str(MEMSTACK), args=["mcp"], env=_env(tmp_path))
    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        async with Client(stdio_client(params, errlog=err)) as client:
            said = {"user_id": "u1", "session_id": "s1", "role": "user"}
            await client.call_tool("remember", {**said, "content": "I live in Lisbon."})
            asked = {"user_id": "u1", "session_id": "s2", "query": "Where do I live?"}
            answer = await client.call_tool("recall_context", asked)
    assert not answer.is_error
    assert (tmp_path / "home" / "memstack.db").exists()  # it did migrate
    assert errlog.read_text() == ""


HEAVY = ("sqlalchemy", "redis", "numpy", "alembic", "onnxruntime", "torch", "chromadb", "openai")


def test_the_cli_and_its_help_import_no_store_or_model_stack() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['memstack', '--help']\n"
        "import memstack.cli\n"
        "try:\n"
        "    memstack.cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Commands" in done.stdout  # the help was printed
    assert done.stdout.splitlines()[-1] == "[]"


def test_the_public_api_resolves_every_name_on_first_use() -> None:
    probe = (
        "import sys, memstack\n"
        "assert 'sqlalchemy' not in sys.modules\n"
        "missing = [n for n in memstack.__all__ if getattr(memstack, n, None) is None]\n"
        "assert set(memstack.__all__) <= set(dir(memstack))\n"
        "from memstack import AsyncMemory, Memory, Settings\n"
        "print(missing, AsyncMemory.__module__, Memory.__module__, Settings.__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    modules = ["memstack.memory", "memstack.sync", "memstack.core.settings"]
    assert done.stdout.split() == ["[]", *modules]
