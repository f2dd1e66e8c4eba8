"""Assembling the context: the order of the sections and their labels (docs/spec.md, Read path).

Order: system → known user facts → domain knowledge → related history → recent
dialogue → current input. The most certain information goes first and the most
relevant process last, next to the question: placed in the middle of a long history,
facts were ignored by the model. Light labels tell the model what is certain ("known
user facts") and what is a possibly stale memory ("for reference, may be incomplete").

The result comes as plain ``text`` and as OpenAI chat ``messages`` (one system message
holding everything up to the history, the recent dialogue as turns, the input last).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstack.core.errors import ValidationError
from memstack.core.messages import Message
from memstack.text.token_counts import line_tokens
from memstack.types import Section as Section

SECTION_ORDER = ("system", "facts", "knowledge", "history", "recent", "input")


@dataclass(frozen=True)
class Labels:
    locale: str
    system: str
    facts: str
    knowledge: str
    history: str
    recent: str
    input: str
    roles: Mapping[str, str]
    sources: Mapping[str, str]
    fact_keys: Mapping[str, str]
    list_sep: str
    colon: str
    paren: tuple[str, str]
    # A note after a recalled sentence whose fact has changed since: {key}, {value}.
    outdated: str
    just_now: str
    ages: Mapping[str, tuple[str, str]]  # unit -> (singular, plural) templates


ZH = Labels(
    locale="zh",
    system=(
        "你是一个具有长期记忆的助手。下面的“已知用户信息”是确定的事实；"
        "“相关历史片段”只是回忆，仅供参考。"
    ),
    facts="## 已知用户信息",
    knowledge="## 领域知识",
    history="## 相关历史片段（仅供参考，可能不完整）",
    recent="## 最近对话",
    input="## 当前用户输入",
    roles={"user": "用户", "assistant": "助手", "system": "系统", "tool": "工具"},
    sources={"user_stated": "用户明确说明", "extract": "从对话中提取", "inferred": "推断"},
    fact_keys={
        "budget_limit": "预算上限",
        "likes": "喜欢",
        "dislikes": "不喜欢",
        "focus": "关注重点",
        "do_not_recommend": "不要推荐",
        "name": "姓名",
        "city": "所在城市",
        "occupation": "职业",
        "language": "语言",
        "goal": "目标",
        "diet": "饮食",
        "allergies": "过敏",
        "birthday": "生日",
        "family": "家人",
        "pets": "宠物",
    },
    list_sep="、",
    colon="：",
    paren=("（", "）"),
    outdated="已过时：{key}现为{value}",
    just_now="刚刚",
    ages={
        "minute": ("{n}分钟前", "{n}分钟前"),
        "hour": ("{n}小时前", "{n}小时前"),
        "day": ("{n}天前", "{n}天前"),
        "month": ("{n}个月前", "{n}个月前"),
        "year": ("{n}年前", "{n}年前"),
    },
)

EN = Labels(
    locale="en",
    system=(
        "You are an assistant with long-term memory. The known user facts below are "
        "reliable; the related history is only a recollection, for reference."
    ),
    facts="## Known user facts",
    knowledge="## Domain knowledge",
    history="## Related history (for reference, may be incomplete)",
    recent="## Recent dialogue",
    input="## Current user input",
    roles={"user": "user", "assistant": "assistant", "system": "system", "tool": "tool"},
    sources={
        "user_stated": "stated by the user",
        "extract": "extracted from the dialogue",
        "inferred": "inferred",
    },
    fact_keys={
        "budget_limit": "Budget limit",
        "likes": "Likes",
        "dislikes": "Dislikes",
        "focus": "Focus",
        "do_not_recommend": "Do not recommend",
        "name": "Name",
        "city": "City",
        "occupation": "Occupation",
        "language": "Language",
        "goal": "Goal",
        "diet": "Diet",
        "allergies": "Allergies",
        "birthday": "Birthday",
        "family": "Family",
        "pets": "Pets",
    },
    list_sep=", ",
    colon=": ",
    paren=(" (", ")"),
    outdated="outdated: {key} is now {value}",
    just_now="just now",
    ages={
        "minute": ("{n} minute ago", "{n} minutes ago"),
        "hour": ("{n} hour ago", "{n} hours ago"),
        "day": ("{n} day ago", "{n} days ago"),
        "month": ("{n} month ago", "{n} months ago"),
        "year": ("{n} year ago", "{n} years ago"),
    },
)

LABELS: dict[str, Labels] = {"zh": ZH, "en": EN}


def labels_for(locale: str) -> Labels:
    try:
        return LABELS[locale]
    except KeyError:
        raise ValidationError(f"locale must be one of {sorted(LABELS)}, got {locale!r}") from None


# --- items ---------------------------------------------------------------------------------


def relative_age(age_s: float, labels: Labels) -> str:
    """``3天前`` / ``3 days ago``: coarse on purpose, the model needs the order of magnitude."""
    if age_s < 60:
        # A snippet "from the future" (clock skew, a replayed dataset) reads as just now.
        return labels.just_now
    for unit, size, upper in (
        ("minute", 60, 3600),
        ("hour", 3600, 86400),
        ("day", 86400, 30 * 86400),
        ("month", 30 * 86400, 365 * 86400),
    ):
        if age_s < upper:
            return _age(labels, unit, int(age_s // size))
    return _age(labels, "year", int(age_s // (365 * 86400)))


def _age(labels: Labels, unit: str, n: int) -> str:
    singular, plural = labels.ages[unit]
    return (singular if n == 1 else plural).format(n=n)


# A fact value is printed in at most this many characters, and its nesting followed this
# deep: values are short records (docs/facts.md), and one stored before the checks
# existed (20 MB, 500 levels deep) must cost a context() nothing.
VALUE_CHARS = 300
VALUE_DEPTH = 8
_MORE = "…"


@dataclass(frozen=True)
class _Pair:
    key: object
    value: Any


def _money(value: Mapping[str, Any]) -> str | None:
    amount = value["amount"]
    if isinstance(amount, bool) or not isinstance(amount, int | float | str):
        return None
    if isinstance(amount, float) and amount.is_integer():
        amount = int(amount)
    currency = value.get("currency")
    if isinstance(currency, Mapping | list | tuple):
        return None
    return f"{_leaf(amount)} {_leaf(currency)}" if currency else _leaf(amount)


def _leaf(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value[: VALUE_CHARS + 1]
    try:
        return str(value)[: VALUE_CHARS + 1]
    except ValueError:  # an int of more digits than Python prints
        return _MORE


_END = object()


def _value_pieces(value: Any, labels: Labels) -> Iterator[str]:
    """The pieces of a value's text, in order, without recursion: a stack of iterators
    over the containers being printed, at most :data:`VALUE_DEPTH` of them."""
    stack: list[tuple[Iterator[Any], list[bool]]] = [(iter((value,)), [False])]
    while stack:
        children, started = stack[-1]
        item = next(children, _END)
        if item is _END:
            stack.pop()
            continue
        if started[0]:
            yield labels.list_sep
        started[0] = True
        if isinstance(item, _Pair):
            yield f"{_leaf(item.key)}="
            item = item.value
        if isinstance(item, Mapping) and "amount" in item and (money := _money(item)) is not None:
            yield money
        elif isinstance(item, Mapping | list | tuple):
            if len(stack) > VALUE_DEPTH:
                yield _MORE
            elif isinstance(item, Mapping):
                stack.append(((_Pair(k, v) for k, v in item.items()), [False]))
            else:
                stack.append((iter(item), [False]))
        else:
            yield _leaf(item)


def format_value(value: Any, labels: Labels, *, limit: int = VALUE_CHARS) -> str:
    """A fact value as a person writes it: ``8000 CNY``, ``续航、重量``; at most
    ``limit`` characters (cut with …), whatever its size or depth."""
    out: list[str] = []
    size = 0
    for piece in _value_pieces(value, labels):
        if size + len(piece) > limit:
            out.append(piece[: max(limit - size, 0)] + _MORE)
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def mark_outdated(
    text: str,
    stale: Sequence[tuple[int, int, str]],
    current: Mapping[str, Any],
    labels: Labels,
) -> str:
    """``text`` with a note after each sentence of ``stale`` (start, end, key) that its
    fact is now another value: ``我预算不超过五千（已过时：预算上限现为8000 CNY）``."""
    out, at = [], 0
    left, right = labels.paren
    for start, end, key in stale:
        sentence = text[start:end]
        body = sentence.rstrip()
        name = labels.fact_keys.get(key, key.replace("_", " "))
        note = labels.outdated.format(key=name, value=format_value(current.get(key), labels))
        out += [text[at:start], body, f"{left}{note}{right}", sentence[len(body) :]]
        at = end
    out.append(text[at:])
    return "".join(out)


def render_fact(key: str, value: Any, source: str, labels: Labels) -> str:
    """``- 预算上限：8000 CNY（用户明确说明）``"""
    name = labels.fact_keys.get(key, key[:128].replace("_", " "))
    how = labels.sources.get(source, source)
    left, right = labels.paren
    return f"- {name}{labels.colon}{format_value(value, labels)}{left}{how}{right}"


def speaker(role: str, labels: Labels, name: str | None = None) -> str:
    """``Tim：`` for a named author, else the role's label (``用户：`` / ``User: ``)."""
    return f"{name or labels.roles.get(role, role)}{labels.colon}"


def render_turn(role: str, content: str, labels: Labels, name: str | None = None) -> str:
    return f"{speaker(role, labels, name)}{content.strip()}"


def render_history(age_s: float, turns: Sequence[tuple[str, str]], labels: Labels) -> str:
    """``- [3天前] 用户：…`` with further turns of the same snippet indented below."""
    lines = [render_turn(role, content, labels) for role, content in turns]
    head = f"- [{relative_age(age_s, labels)}] {lines[0]}"
    return "\n".join([head, *("  " + line for line in lines[1:])])


def age_header(age_s: float, labels: Labels) -> str:
    """``- [3天前]``: the head of a group of history items of the same age."""
    return f"- [{relative_age(age_s, labels)}]"


def render_history_groups(items: Sequence[tuple[str, str]]) -> list[str]:
    """History lines from ``(age header, body)`` pairs in time order.

    Items of the same age share one header: the age is said once, not once per line,
    which leaves room for more recall in the same budget. A lone item stays on one line.
    """
    groups: list[tuple[str, list[str]]] = []
    for header, body in items:
        if groups and groups[-1][0] == header:
            groups[-1][1].append(body)
        else:
            groups.append((header, [body]))
    lines: list[str] = []
    for header, bodies in groups:
        if len(bodies) == 1:
            lines.append(f"{header} {bodies[0]}")
        else:
            lines.append(header)
            lines.extend("  " + body for body in bodies)
    return lines


# --- sections ------------------------------------------------------------------------------


def section_tokens(title: str | None, lines: Sequence[str]) -> int:
    """Tokens of a section holding ``lines``: 0 when empty (no title is printed then)."""
    if not lines:
        return 0
    return (line_tokens(title) if title else 0) + sum(line_tokens(line) for line in lines)


@dataclass(frozen=True)
class Assembled:
    text: str
    messages: list[dict[str, str]]
    sections: dict[str, Section] = field(default_factory=dict)


def assemble(
    *,
    labels: Labels,
    system: str,
    facts: Sequence[str] = (),
    knowledge: Sequence[str] = (),
    history: Sequence[str] = (),
    recent: Sequence[Message] = (),
    query: str,
) -> Assembled:
    """Join the rendered sections in the specification's order; empty sections are left out."""
    sections = {
        "system": Section("system", None, (system,) if system.strip() else ()),
        "facts": Section("facts", labels.facts, tuple(facts)),
        "knowledge": Section("knowledge", labels.knowledge, tuple(knowledge)),
        "history": Section("history", labels.history, tuple(history)),
        "recent": Section(
            "recent",
            labels.recent,
            tuple(render_turn(t.role, t.content, labels, t.name) for t in recent),
        ),
        "input": Section("input", labels.input, (query,)),
    }
    text = "\n\n".join(s.text for name in SECTION_ORDER if (s := sections[name]).text)
    head = "\n\n".join(
        s.text for name in ("system", "facts", "knowledge", "history") if (s := sections[name]).text
    )
    messages: list[dict[str, str]] = []
    if head:
        messages.append({"role": "system", "content": head})
    messages.extend(_chat_turn(t, labels) for t in recent)
    messages.append({"role": "user", "content": query})
    return Assembled(text=text, messages=messages, sections=sections)


# OpenAI accepts a message ``name`` only in this shape; another name goes into the content.
_CHAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _chat_turn(turn: Message, labels: Labels) -> dict[str, str]:
    if turn.role in ("user", "assistant", "system"):
        if turn.name is None:
            return {"role": turn.role, "content": turn.content}
        if _CHAT_NAME.fullmatch(turn.name):
            return {"role": turn.role, "name": turn.name, "content": turn.content}
        return {"role": turn.role, "content": f"{turn.name}{labels.colon}{turn.content}"}
    # A chat "tool" message must answer a tool call id we no longer have; the assistant
    # role with a label keeps the content and stays valid for every endpoint.
    return {
        "role": "assistant",
        "content": f"[{turn.name or labels.roles.get(turn.role, turn.role)}] {turn.content}",
    }
