"""Token budgets of the assembled context, per layer (docs/spec.md, Read path).

The budget is cut by tokens, not by item counts: one message may be twenty characters
or a page of requirements, and a count-based cut makes the prompt length swing. Each
layer gets a share of what is left after the system text and the current input; a share
a layer does not need passes on to the layers that still have items waiting, so a new
session with an empty window spends its budget on recall and facts instead of wasting
it. A layer whose share is 0 is switched off and never receives a passed-on share.

Layers are packed by callbacks (:data:`Packer`): this module only decides the caps and
guarantees that the caps never add up to more than the budget. Token counts come from
:func:`memstack.text.token_counts.count_tokens`, which handles Chinese and English.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memstack.core.errors import ValidationError
from memstack.text.token_counts import count_tokens
from memstack.types import Allocation as Allocation

ELLIPSIS = "…"


@dataclass(frozen=True)
class Fit:
    """What a layer packed into a cap: tokens used, and whether everything it had fitted."""

    used: int
    complete: bool


Packer = Callable[[int], Fit]


def base_caps(available: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Each layer's first cap: its share of ``available``, rounded down."""
    if available < 0:
        raise ValidationError(f"available tokens must not be negative, got {available}")
    for name, share in shares.items():
        if not 0.0 <= share <= 1.0:
            raise ValidationError(f"share of {name!r} must be within [0, 1], got {share}")
    total_share = sum(shares.values())
    if total_share > 1.0 + 1e-9:
        raise ValidationError(f"shares add up to {total_share:.3f}; they must not exceed 1")
    return {name: int(available * share) for name, share in shares.items()}


def _spread(pool: int, hungry: list[str], shares: Mapping[str, float]) -> dict[str, int]:
    """Split ``pool`` tokens among ``hungry`` layers in proportion to their shares."""
    weight = sum(shares[n] for n in hungry)
    extra = {n: int(pool * shares[n] / weight) for n in hungry}
    # Rounding leftovers go to the largest share first, so no token is lost.
    rest = pool - sum(extra.values())
    for name in sorted(hungry, key=lambda n: -shares[n]):
        if rest <= 0:
            break
        extra[name] += 1
        rest -= 1
    return extra


def allocate(
    total: int,
    *,
    reserved: int,
    shares: Mapping[str, float],
    packers: Mapping[str, Packer],
    max_rounds: int = 6,
) -> Allocation:
    """Give each layer a cap and pack it; pass unused tokens on to layers still hungry.

    ``reserved`` tokens (system text, current input) come off the top. The returned
    caps add up to at most ``total - reserved``, and every layer's ``used`` is at most
    its cap, so the assembled context cannot exceed ``total``.
    """
    if total <= 0:
        raise ValidationError(f"budget_tokens must be positive, got {total}")
    if reserved > total:
        raise ValidationError(
            f"the system text and the current input take {reserved} tokens, more than the "
            f"budget of {total}; raise budget_tokens or shorten the input"
        )
    if set(packers) != set(shares):
        raise ValidationError(f"packers {sorted(packers)} do not match shares {sorted(shares)}")
    available = total - reserved
    caps = base_caps(available, shares)
    fits = {name: packers[name](cap) for name, cap in caps.items()}
    for _ in range(max_rounds):
        hungry = [n for n, f in fits.items() if not f.complete and shares[n] > 0]
        # A satisfied layer keeps only what it used; a hungry one keeps its whole cap
        # (its greedy packing may leave a few tokens the next item did not fit in).
        base = {n: (caps[n] if n in hungry else fits[n].used) for n in caps}
        pool = available - sum(base.values())
        if not hungry or pool <= 0:
            break
        extra = _spread(pool, hungry, shares)
        caps = {n: base[n] + extra.get(n, 0) for n in caps}
        fits = {n: packers[n](caps[n]) if n in extra else fits[n] for n in caps}
    used = {n: f.used for n, f in fits.items()}
    for name, u in used.items():
        if u > caps[name]:
            raise AssertionError(f"layer {name!r} packed {u} tokens into a cap of {caps[name]}")
    return Allocation(total=total, reserved=reserved, caps=caps, used=used)


def truncate_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` (plus an ellipsis) within ``max_tokens``; '' if none.

    Used for a single item larger than its whole layer, e.g. a pasted document as the
    latest message: better its beginning than an empty recent dialogue.
    """
    if count_tokens(text) <= max_tokens:
        return text
    if max_tokens <= count_tokens(ELLIPSIS):
        return ""
    lo, hi = 0, len(text)
    # Token counts grow with the prefix length, so the cut can be found by bisection.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid].rstrip() + ELLIPSIS) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + ELLIPSIS if lo else ""
