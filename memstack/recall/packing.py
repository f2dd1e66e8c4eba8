"""Packing one layer into one token cap; :mod:`memstack.recall.budget` decides the caps."""

from __future__ import annotations

from collections.abc import Sequence

from memstack.core.messages import Message
from memstack.recall.assembly import Labels, speaker
from memstack.recall.budget import Fit, truncate_tokens
from memstack.recall.ranking import Candidate
from memstack.text.token_counts import line_tokens


def pack_lines(title: str, lines: Sequence[str], cap: int) -> tuple[list[int], Fit]:
    """Lines in their order (facts by confidence, knowledge by score), skipping misfits."""
    used = line_tokens(title) if lines else 0
    chosen: list[int] = []
    if used <= cap:
        for i, line in enumerate(lines):
            t = line_tokens(line)
            if used + t <= cap:
                chosen.append(i)
                used += t
    return chosen, Fit(used if chosen else 0, len(chosen) == len(lines))


def pack_history(
    title: str, eligible: Sequence[Candidate], cap: int, keep: int
) -> tuple[list[Candidate], Fit]:
    """Best first, skipping misfits; an age header is paid once per group of items."""
    used = line_tokens(title) if eligible else 0
    chosen: list[Candidate] = []
    headers: set[str] = set()
    if used <= cap:
        for c in eligible:
            if len(chosen) >= keep:
                break
            cost = c.body_tokens + (0 if c.header in headers else c.header_tokens)
            if used + cost <= cap:
                chosen.append(c)
                headers.add(c.header)
                used += cost
    complete = len(chosen) == min(len(eligible), keep)
    return chosen, Fit(used if chosen else 0, complete)


def pack_window(
    labels: Labels, turns: Sequence[Message], cap: int
) -> tuple[list[tuple[int, str]], Fit]:
    """The newest turns that fit, kept contiguous: a gap in the middle of the recent
    dialogue would make it read wrong. If not even the latest turn fits, its beginning."""
    heads = [speaker(t.role, labels, t.name) for t in turns]
    used = line_tokens(labels.recent) if turns else 0
    chosen: list[tuple[int, str]] = []
    if turns and used < cap:
        for i in range(len(turns) - 1, -1, -1):
            t = line_tokens(heads[i] + turns[i].content.strip())
            if used + t <= cap:
                chosen.append((i, turns[i].content))
                used += t
                continue
            if not chosen:
                cut = truncate_tokens(turns[i].content.strip(), cap - used - line_tokens(heads[i]))
                if cut:
                    chosen.append((i, cut))
                    used += line_tokens(heads[i] + cut)
            break
    whole = len(chosen) == len(turns) and all(text == turns[i].content for i, text in chosen)
    return sorted(chosen), Fit(used if chosen else 0, whole)
