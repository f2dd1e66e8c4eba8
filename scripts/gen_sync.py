"""Write the synchronous twins from their async originals, so each verb is written once:

- memstack/client/_sync.py from memstack/client/_async.py, by a token rewrite;
- memstack/_sync_generated.py: Memory's plain forwarders, one per public coroutine of
  AsyncMemory that memstack/sync.py neither writes by hand nor names in ASYNC_ONLY.

    python scripts/gen_sync.py           # write both
    python scripts/gen_sync.py --check   # exit 1, naming each stale file, if one is stale
"""

from __future__ import annotations

import argparse
import ast
import builtins
import difflib
import inspect
import io
import itertools
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT_ASYNC = ROOT / "memstack/client/_async.py"
CLIENT_SYNC = ROOT / "memstack/client/_sync.py"
SYNC = ROOT / "memstack/sync.py"
FORWARDERS = ROOT / "memstack/_sync_generated.py"

# Names of the async client and their blocking forms (httpx names both alike).
NAMES = {
    "AsyncMemoryClient": "MemoryClient",
    "AsyncMemory": "Memory",
    "AsyncClient": "Client",
    "AsyncBaseTransport": "BaseTransport",
    "AsyncGenerator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
}
# In docstrings: the same names, and the async words dropped.
WORDS = {**NAMES, "coroutines": "methods", "async with": "with", "await ": ""}
IN_WORDS = re.compile("|".join(rf"\b{re.escape(w)}" for w in sorted(WORDS, key=len, reverse=True)))


def _ruff(text: str, path: Path) -> str:
    """The text as ruff would leave it: imports sorted, then formatted (the project's
    configuration, found from ``path``)."""
    sibling = Path(sys.executable).with_name("ruff")
    ruff = str(sibling) if sibling.exists() else shutil.which("ruff") or "ruff"
    name = str(path.relative_to(ROOT))
    for args in (["check", "--select", "I", "--fix-only", "--quiet"], ["format", "--quiet"]):
        text = subprocess.run(
            [ruff, *args, "--stdin-filename", name, "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def client_twin() -> str:
    # An async generator of lines is, blocking, an iterator of them.
    source = re.sub(r"AsyncGenerator\[(\w+), None\]", r"Iterator[\1]", CLIENT_ASYNC.read_text())
    lines = source.splitlines(keepends=True)
    edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for tok, following in itertools.pairwise(tokens):
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            edits.append((tok.start, following.start, ""))  # the word and the space after it
        elif tok.type == tokenize.NAME and tok.string in NAMES:
            edits.append((tok.start, tok.end, NAMES[tok.string]))
        elif tok.type == tokenize.STRING:
            text = re.sub(IN_WORDS, lambda m: WORDS[m.group(0)], tok.string)
            edits.append((tok.start, tok.end, text))
    for (row, col), (end_row, end_col), text in reversed(edits):
        head, tail = lines[row - 1][:col], lines[end_row - 1][end_col:]
        lines[row - 1 : end_row] = [head + text + tail]
    header = "# generated from _async.py by scripts/gen_sync.py — do not edit\n"
    return _ruff(header + "".join(lines), CLIENT_SYNC)


# --- Memory's forwarders ----------------------------------------------------------------------


def _hand_written() -> tuple[frozenset[str], set[str]]:
    """sync.py's ASYNC_ONLY and the methods its Memory class writes by hand."""
    tree = ast.parse(SYNC.read_text())
    async_only: frozenset[str] = frozenset()
    by_hand: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "ASYNC_ONLY":
            assert isinstance(node.value, ast.Call)
            async_only = frozenset(ast.literal_eval(node.value.args[0]))
        if isinstance(node, ast.ClassDef) and node.name == "Memory":
            by_hand = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return async_only, by_hand


def _module_names(tree: ast.Module, module: str) -> dict[str, tuple[str, str]]:
    """Where each top-level name of a module comes from: (module, name there); imports
    under ``if TYPE_CHECKING:`` count, since annotations may name them."""
    out: dict[str, tuple[str, str]] = {}
    body = [*tree.body]
    for node in body:
        if isinstance(node, ast.If):
            body.extend(node.body)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.update({a.asname or a.name: (node.module, a.name) for a in node.names})
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = (module, node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update({t.id: (module, t.id) for t in targets if isinstance(t, ast.Name)})
    return out


def _signature(node: ast.AsyncFunctionDef) -> tuple[list[str], list[str], list[ast.expr]]:
    """The parameters as written, the arguments that pass them on, and the expressions
    (annotations, defaults) whose names the generated module must import."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
    pairs = list(zip(positional, [*defaults, *a.defaults], strict=True))
    pairs += list(zip(a.kwonlyargs, a.kw_defaults, strict=True))
    exprs = [e for arg, d in pairs for e in (arg.annotation, d) if e is not None]
    exprs += [x.annotation for x in (a.vararg, a.kwarg) if x and x.annotation]

    def one(arg: ast.arg, default: ast.expr | None = None) -> str:
        text = arg.arg + (f": {ast.unparse(arg.annotation)}" if arg.annotation else "")
        return text + (f" = {ast.unparse(default)}" if default else "")

    params = [one(arg, d) for arg, d in pairs[: len(positional)]]
    if a.posonlyargs:
        params.insert(len(a.posonlyargs), "/")
    call = [arg.arg for arg, _ in pairs[1 : len(positional)]]
    if a.vararg:
        params.append("*" + one(a.vararg))
        call.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        params.append("*")
    params += [one(arg, d) for arg, d in pairs[len(positional) :]]
    call += [f"{arg.arg}={arg.arg}" for arg in a.kwonlyargs]
    if a.kwarg:
        params.append("**" + one(a.kwarg))
        call.append("**" + a.kwarg.arg)
    return params, call, exprs


def _forwarder(node: ast.AsyncFunctionDef) -> tuple[str, list[ast.expr]]:
    params, call, exprs = _signature(node)
    returns = ast.unparse(node.returns) if node.returns else "None"
    if node.returns:
        exprs.append(node.returns)
    doc = (ast.get_docstring(node, clean=False) or "").split("\n\n")[0].strip()
    body = f'        """{doc}"""\n' if doc else ""
    run = f"self._run(self.aio.{node.name}({', '.join(call)}))"
    body += f"        {run}\n" if returns == "None" else f"        return {run}\n"
    return f"    def {node.name}({', '.join(params)}) -> {returns}:\n{body}", exprs


def memory_forwarders() -> str:
    sys.path.insert(0, str(ROOT))
    from memstack.memory import AsyncMemory

    async_only, by_hand = _hand_written()
    public = {
        name
        for name, member in inspect.getmembers(AsyncMemory)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }
    if stale := async_only - public:
        sys.exit(f"sync.py: ASYNC_ONLY names no public coroutine of AsyncMemory: {sorted(stale)}")
    wanted, seen = public - async_only - by_hand, set[str]()
    imports: dict[str, tuple[str, str]] = {"AsyncMemory": ("memstack.memory", "AsyncMemory")}
    methods: list[str] = []
    for cls in AsyncMemory.__mro__[:-1]:  # in the order a lookup takes, without object
        path = Path(inspect.getfile(cls))
        tree = ast.parse(path.read_text())
        names = _module_names(tree, cls.__module__)
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
        nodes = [n for n in body.body if isinstance(n, ast.AsyncFunctionDef)]
        nodes = [n for n in nodes if n.name in wanted - seen]
        for i, node in enumerate(nodes):
            seen.add(node.name)
            text, exprs = _forwarder(node)
            methods.append((f"    # from {path.relative_to(ROOT)}\n" if i == 0 else "") + text)
            used = {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)}
            for name in sorted(used - set(dir(builtins))):
                if name not in names:
                    sys.exit(f"{path}: {name} in {node.name}'s signature is not a module name")
                if imports.setdefault(name, names[name]) != names[name]:
                    sys.exit(f"{path}: {name} names two things in AsyncMemory's signatures")
    if missing := wanted - seen:
        sys.exit(f"no source for AsyncMemory's coroutines {sorted(missing)}")
    by_module: dict[str, list[str]] = {}
    for name, (module, original) in imports.items():
        by_module.setdefault(module, []).append(
            name if original == name else f"{original} as {name}"
        )
    lines = [f"from {m} import {', '.join(sorted(n))}\n" for m, n in sorted(by_module.items())]
    head = f'''# generated from AsyncMemory by scripts/gen_sync.py — do not edit
"""Memory's plain forwarders (memstack/sync.py): one per public coroutine of
:class:`AsyncMemory` that sync.py neither writes by hand nor names in ``ASYNC_ONLY``,
with its parameters, answer and docstring's first paragraph."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

{"".join(lines)}
T = TypeVar("T")


class MemoryForwarders:
    """Each method runs its :class:`AsyncMemory` coroutine on :class:`Memory`'s loop."""

    aio: AsyncMemory

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError  # Memory runs it on its private loop

'''
    return _ruff(head + "\n".join(methods), FORWARDERS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    check = parser.parse_args().check
    stale = []
    for path, make in ((CLIENT_SYNC, client_twin), (FORWARDERS, memory_forwarders)):
        text, old = make(), path.read_text() if path.exists() else ""
        if text == old:
            continue
        if not check:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
            continue
        diff = difflib.unified_diff(old.splitlines(), text.splitlines(), lineterm="", n=0)
        changed = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        lines = f"{len(changed)} line" + ("" if len(changed) == 1 else "s")
        stale.append(f"{path.relative_to(ROOT)} differs by {lines}")
    if stale:
        sys.exit(f"stale, run python scripts/gen_sync.py: {'; '.join(stale)}")


if __name__ == "__main__":
    main()
