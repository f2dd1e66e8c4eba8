"""The workload of the fault suite: a planned conversation, and the loader that sends it.

:func:`plan_workload` plans the messages (users, sessions, roles, facts, times);
:class:`Loader` sends them through ``AsyncMemory.remember`` with a caller id per
message, retried until acknowledged.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from redis.exceptions import RedisError

from memstack.core.errors import MemstackError, StoreUnavailable
from memstack.memory import AsyncMemory

CITIES = (
    "Lisbon", "Porto", "Madrid", "Seville", "Paris", "Lyon", "Berlin", "Munich", "Vienna",
    "Prague", "Warsaw", "Krakow", "Oslo", "Bergen", "Stockholm", "Helsinki", "Dublin",
    "Edinburgh", "Glasgow", "Toronto", "Montreal", "Boston", "Chicago", "Denver", "Seattle",
    "Austin", "Kyoto", "Osaka", "Sapporo", "Busan",
)  # fmt: skip
TOPICS_EN = (
    "a laptop for programming", "a quiet hotel near the station", "a gift for my sister",
    "running shoes", "a weekend trip", "a used bicycle", "a coffee grinder", "a desk chair",
    "noise-cancelling headphones", "a tent for two",
)  # fmt: skip
TOPICS_ZH = ("轻薄本", "机械键盘", "旅行箱", "咖啡机", "显示器", "登山鞋", "蓝牙音箱", "台灯")
QUESTIONS = (
    "What would you suggest for {topic}?",
    "Can you compare two options for {topic}?",
    "帮我看看{zh}有什么推荐？",
    "Is there anything I should avoid when buying {topic}?",
    "{zh}哪个牌子比较耐用？",
)
REPLIES = (
    ("assistant", "Here are three options for {topic}, sorted by price."),
    ("tool", '{{"results": 3, "query": "{topic}", "source": "catalogue"}}'),
    ("assistant", "好的，我整理了几款{zh}，价格从低到高。"),
    ("tool", '{{"stock": "ok", "item": "{zh}"}}'),
    ("assistant", "The second one fits best; it is lighter and cheaper."),
)


@dataclass(frozen=True)
class Turn:
    """One planned message. ``caller_id`` is the idempotency key ``remember`` gets."""

    user_id: str
    session_id: str
    role: str
    content: str
    caller_id: str
    ts_ms: int
    fact: str | None = None  # the fact the rules should extract, e.g. "budget_limit"

    @property
    def ts(self) -> datetime:
        # Half a millisecond in: the float arithmetic of to_ms() cannot round it down.
        return datetime.fromtimestamp(self.ts_ms / 1000 + 0.0005, tz=UTC)


@dataclass
class Workload:
    sessions: list[list[Turn]]
    tag: str

    @property
    def turns(self) -> list[Turn]:
        return sorted((t for s in self.sessions for t in s), key=lambda t: t.ts_ms)

    @property
    def users(self) -> list[str]:
        return sorted({s[0].user_id for s in self.sessions if s})

    def __len__(self) -> int:
        return sum(len(s) for s in self.sessions)


# The fact keys the workload's user turns state.
STATED_KEYS = frozenset({"budget_limit", "city"})
# One planned message before it has a time: role, content, the fact it states.
Planned = tuple[str, str, str | None]


def plan_workload(
    messages: int,
    *,
    users: int = 6,
    sessions_per_user: int = 3,
    tag: str | None = None,
    seed: int = 15,
    fact_share: float = 0.35,
    start_ms: int | None = None,
    step_ms: int = 10,
) -> Workload:
    """``messages`` messages over ``users × sessions_per_user`` sessions.

    Turns alternate user / reply; every third session answers with two or three
    consecutive assistant and tool replies. About ``fact_share`` of the user turns state
    a fact the offline rules extract (a budget, a city), each with a value the user
    never stated before, so which value is current depends only on the messages' times,
    never on the order a worker processes them. Half the users state budgets in English
    dollars ("My budget is at most $N"), the others in Chinese ("我预算不超过N千"), never
    both: the rules read "N千" in the currency of the budget current when the message is
    processed, which would make the stored currency depend on that order. Times are
    distinct across the whole workload, ``step_ms`` apart, ending now.
    """
    rng = random.Random(seed)
    tag = tag or uuid.uuid4().hex[:6]
    n_sessions = users * sessions_per_user
    sizes = [
        messages // n_sessions + (1 if i < messages % n_sessions else 0) for i in range(n_sessions)
    ]
    counters: dict[str, int] = defaultdict(int)
    keyed: list[tuple[str, str, list[Planned]]] = []
    for i, size in enumerate(sizes):
        user = f"{tag}u{i // sessions_per_user}"
        session = f"{tag}u{i // sessions_per_user}s{i % sessions_per_user}"
        english = (i // sessions_per_user) % 2 == 0
        turns = _session_script(
            rng, size, counters, user, multi=i % 3 == 0, english=english, fact_share=fact_share
        )
        keyed.append((user, session, turns))
    start = start_ms if start_ms is not None else int(time.time() * 1000) - messages * step_ms
    return Workload(_interleave(keyed, start, step_ms), tag)


def _session_script(
    rng: random.Random,
    size: int,
    counters: dict[str, int],
    user: str,
    *,
    multi: bool,
    english: bool,
    fact_share: float,
) -> list[Planned]:
    """``size`` messages of one session of ``user``: a user turn, then its replies."""
    turns: list[Planned] = []
    while len(turns) < size:
        topic, zh = rng.choice(TOPICS_EN), rng.choice(TOPICS_ZH)
        n = counters[user]
        counters[user] += 1
        turns.append(_user_turn(rng, n, topic, zh, english=english, fact_share=fact_share))
        replies = rng.randint(2, 3) if multi else 1
        for r in range(replies):
            if len(turns) >= size:
                break
            # Single replies are assistant turns; a multi-reply answer is assistant,
            # tool, assistant (or the Chinese variants).
            role, text = REPLIES[r + 2 * (n % 2) if multi else 2 * (n % 3)]
            turns.append((role, text.format(topic=topic, zh=zh) + f" [{n}.{r}]", None))
    return turns


def _user_turn(
    rng: random.Random, n: int, topic: str, zh: str, *, english: bool, fact_share: float
) -> Planned:
    """The ``n``-th user turn of a user: a question, or (``fact_share`` of the time) a
    fact with a value the user has not stated before."""
    if rng.random() >= fact_share:
        return ("user", rng.choice(QUESTIONS).format(topic=topic, zh=zh) + f" (#{n})", None)
    if n % 2 == 0 and english:
        return ("user", f"My budget is at most ${1003 + 10 * n} for {topic}.", "budget_limit")
    if n % 2 == 0:
        return ("user", f"我预算不超过{n + 2}千，想看看{zh}。", "budget_limit")
    if n // 2 < len(CITIES):
        return ("user", f"I live in {CITIES[n // 2]}.", "city")
    return ("user", f"Tell me more about {topic}, please (note {n}).", None)


def _interleave(
    keyed: Sequence[tuple[str, str, Sequence[Planned]]], start: int, step_ms: int
) -> list[list[Turn]]:
    """The sessions' turns with times, round robin: times interleave across sessions."""
    out: list[list[Turn]] = [[] for _ in keyed]
    clock = 0
    for pos in range(max((len(t) for _, _, t in keyed), default=0)):
        for idx, (user, session, turns) in enumerate(keyed):
            if pos < len(turns):
                role, content, fact = turns[pos]
                out[idx].append(
                    Turn(user, session, role, content, f"m{pos}", start + clock * step_ms, fact)
                )
                clock += 1
    return out


# --- sending -----------------------------------------------------------------------------

RETRYABLE: tuple[type[BaseException], ...] = (StoreUnavailable, RedisError, OSError, TimeoutError)


@dataclass(frozen=True)
class Sent:
    """An acknowledged message: ``remember`` returned ``msg_id``."""

    turn: Turn
    msg_id: str
    attempts: int
    latency_s: float  # of the call that succeeded
    acked_at: float  # time.monotonic()


class Loader:
    """Sends a workload through ``AsyncMemory.remember``, one task per session (each
    session in order), optionally paced to ``rate`` messages per second overall.

    With ``retry`` a call failing with a store error is repeated with the same caller
    id and time until it succeeds or ``retry_timeout_s`` passes: the id makes the retry
    idempotent. Without it, a failed call is recorded in ``failed`` and not repeated.
    """

    def __init__(
        self,
        mem: AsyncMemory,
        *,
        retry: bool = True,
        retry_timeout_s: float = 180.0,
        rate: float | None = None,
    ) -> None:
        self.mem = mem
        self.retry = retry
        self.retry_timeout_s = retry_timeout_s
        self.rate = rate
        self.acked: list[Sent] = []
        self.failed: list[tuple[Turn, str]] = []  # gave up: never acknowledged
        self.refused: list[tuple[Turn, str]] = []  # a non-retryable error
        self.retries = 0
        self.failed_calls = 0  # every failed attempt, retried or not
        self._slot = 0
        self._t0: float | None = None

    @property
    def done(self) -> int:
        return len(self.acked) + len(self.failed) + len(self.refused)

    async def _pace(self) -> None:
        if not self.rate:
            return
        if self._t0 is None:
            self._t0 = time.monotonic()
        slot, self._slot = self._slot, self._slot + 1
        delay = self._t0 + slot / self.rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def send(self, turn: Turn) -> Sent | None:
        deadline = time.monotonic() + self.retry_timeout_s
        attempts = 0
        while True:
            attempts += 1
            start = time.perf_counter()
            try:
                msg_id = await self.mem.remember(
                    turn.user_id,
                    turn.session_id,
                    turn.role,
                    turn.content,
                    msg_id=turn.caller_id,
                    ts=turn.ts,
                )
            except RETRYABLE as exc:
                self.failed_calls += 1
                if not self.retry or time.monotonic() > deadline:
                    self.failed.append((turn, f"{type(exc).__name__}: {exc}"))
                    return None
                self.retries += 1
                await asyncio.sleep(min(0.05 * 2 ** min(attempts, 5), 1.0))
                continue
            except MemstackError as exc:
                self.refused.append((turn, f"{type(exc).__name__}: {exc}"))
                return None
            sent = Sent(turn, msg_id, attempts, time.perf_counter() - start, time.monotonic())
            self.acked.append(sent)
            return sent

    async def _session(self, turns: Sequence[Turn], stop: asyncio.Event | None) -> None:
        for turn in turns:
            if stop is not None and stop.is_set():
                return
            await self._pace()
            await self.send(turn)

    async def run(
        self, workload: Workload | Sequence[Sequence[Turn]], *, stop: asyncio.Event | None = None
    ) -> None:
        sessions = workload.sessions if isinstance(workload, Workload) else workload
        await asyncio.gather(*(self._session(s, stop) for s in sessions))

    def latencies_ms(self) -> tuple[float, float]:
        """p50 and p99 of the acknowledged calls, in milliseconds."""
        return percentiles([s.latency_s * 1000 for s in self.acked])


def percentiles(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return (float("nan"), float("nan"))
    if len(values) == 1:
        return (values[0], values[0])
    qs = statistics.quantiles(values, n=100, method="inclusive")
    return (qs[49], qs[98])
