"""Per-layer token budgets: caps never exceed the total, unused shares pass on."""

from __future__ import annotations

import random

import pytest

from memstack.core.errors import ValidationError
from memstack.recall.budget import Fit, allocate, base_caps, truncate_tokens
from memstack.text.token_counts import count_tokens


def items_packer(sizes: list[int]):  # type: ignore[no-untyped-def]
    """Greedy packer over items of the given token sizes, like the real layers."""

    def pack(cap: int) -> Fit:
        used = 0
        n = 0
        for size in sizes:
            if used + size <= cap:
                used += size
                n += 1
        return Fit(used, n == len(sizes))

    return pack


SHARES = {"facts": 0.15, "knowledge": 0.20, "semantic": 0.20, "window": 0.45}


def test_random_layers_never_exceed_the_budget() -> None:
    rng = random.Random(7)
    for _ in range(500):
        total = rng.randint(50, 5000)
        reserved = rng.randint(0, total)
        layers = {name: [rng.randint(1, 300) for _ in range(rng.randint(0, 30))] for name in SHARES}
        alloc = allocate(
            total,
            reserved=reserved,
            shares=SHARES,
            packers={n: items_packer(sizes) for n, sizes in layers.items()},
        )
        assert sum(alloc.caps.values()) <= total - reserved
        assert alloc.spent <= total
        for name in SHARES:
            assert alloc.used[name] <= alloc.caps[name]


def test_an_unused_share_passes_on_to_a_hungry_layer() -> None:
    # No facts, no knowledge, a short window: semantic recall may use their shares.
    packers = {
        "facts": items_packer([]),
        "knowledge": items_packer([]),
        "semantic": items_packer([10] * 100),
        "window": items_packer([30]),
    }
    alloc = allocate(1000, reserved=0, shares=SHARES, packers=packers)
    assert alloc.used["window"] == 30
    assert alloc.used["semantic"] == 970  # 200 of its own + everything nobody else used
    with_share_only = base_caps(1000, SHARES)["semantic"]
    assert alloc.used["semantic"] > with_share_only


def test_a_layer_with_share_zero_gets_nothing() -> None:
    shares = {"facts": 0.0, "semantic": 1.0}
    alloc = allocate(
        500,
        reserved=0,
        shares=shares,
        packers={"facts": items_packer([5, 5]), "semantic": items_packer([100])},
    )
    assert alloc.used["facts"] == 0
    assert alloc.used["semantic"] == 100


def test_reserved_over_the_total_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="budget"):
        allocate(10, reserved=11, shares=SHARES, packers={n: items_packer([]) for n in SHARES})
    with pytest.raises(ValidationError, match="positive"):
        allocate(0, reserved=0, shares=SHARES, packers={n: items_packer([]) for n in SHARES})
    with pytest.raises(ValidationError, match="exceed"):
        base_caps(100, {"a": 0.7, "b": 0.7})


@pytest.mark.parametrize(
    "text",
    [
        "我想买一台轻薄笔记本，我预算不超过五千，重点关注续航和重量，不要推荐游戏本。" * 5,
        "I want a light laptop; my budget is at most $5,000 and battery life matters. " * 5,
    ],
)
def test_truncate_stays_within_the_limit(text: str) -> None:
    for limit in (3, 10, 25, 60):
        cut = truncate_tokens(text, limit)
        assert count_tokens(cut) <= limit
        assert cut == "" or text.startswith(cut.rstrip("…").rstrip())
    assert truncate_tokens(text, 10_000) == text
    assert truncate_tokens(text, 0) == ""
