"""The synchronous facade mirrors the async API: every public coroutine of AsyncMemory
has a Memory method of the same name and parameters, unless sync.ASYNC_ONLY names it
(with its reason), and the public API is importable from the package root."""

from __future__ import annotations

import inspect

import memstack
from memstack import AsyncMemory, Memory
from memstack.sync import ASYNC_ONLY


def _public_coroutines(cls: type) -> dict[str, inspect.Signature]:
    out = {}
    for name, member in inspect.getmembers(cls):
        func = getattr(member, "__func__", member)
        if not name.startswith("_") and inspect.iscoroutinefunction(func):
            out[name] = inspect.signature(func)
    return out


def _parameters(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def test_every_async_method_has_a_sync_twin_with_the_same_parameters() -> None:
    missing, different = [], []
    for name, sig in _public_coroutines(AsyncMemory).items():
        if name in ASYNC_ONLY:
            continue
        twin = getattr(Memory, name, None)
        if twin is None:
            missing.append(name)
        elif _parameters(inspect.signature(twin)) != _parameters(sig):
            different.append(name)
    assert missing == [] and different == []


def test_the_async_only_list_names_only_async_methods() -> None:
    # A stale entry would hide a future method under an old name.
    assert set(_public_coroutines(AsyncMemory)) >= ASYNC_ONLY
    assert not any(hasattr(Memory, name) for name in ASYNC_ONLY - {"open"})


def test_the_public_api_is_importable_from_the_package_root() -> None:
    for name in memstack.__all__:
        assert getattr(memstack, name) is not None
    assert issubclass(memstack.StoreUnavailable, memstack.MemstackError)
    assert issubclass(memstack.ValidationError, memstack.MemstackError)
