"""``memstack demo``: a budget conversation, end to end, on whatever stores are configured."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from rich.console import Console
from rich.table import Table

from memstack import AsyncMemory
from memstack.core.settings import Settings

DAY = timedelta(days=1)

SCRIPT_ZH = [
    (0, "user", "我想买一台轻薄笔记本，我预算不超过五千。"),
    (0, "assistant", "好的，五千以内我先帮你筛选续航和重量表现好的机型。"),
    (0, "user", "重点关注续航和重量，不要推荐游戏本。"),
    (0, "assistant", "明白，游戏本排除在外。"),
    (3, "user", "其实我可以到八千，性能也想好一点。"),
    (3, "assistant", "了解，预算调整到八千，我会把性能更好的轻薄本也加进来。"),
]
SCRIPT_EN = [
    (0, "user", "I want a light laptop; my budget is at most $5,000."),
    (0, "assistant", "Got it, I will look for models under $5,000 with good battery life."),
    (0, "user", "I care most about battery life and weight. Do not recommend gaming laptops."),
    (0, "assistant", "Understood, no gaming laptops."),
    (3, "user", "Actually, I can go up to $8,000 if the performance is better."),
    (3, "assistant", "Noted: budget raised to $8,000."),
]


async def run_demo(settings: Settings, console: Console, locale: str = "zh") -> None:
    script = SCRIPT_EN if locale == "en" else SCRIPT_ZH
    stamp = f"{datetime.now(UTC):%Y%m%d%H%M%S}"
    # A fresh user per run: the embedded SQLite keeps earlier runs' facts.
    user, session = f"demo-user-{stamp}", f"demo-{stamp}"
    start = datetime.now(UTC) - 3 * DAY
    async with await AsyncMemory.open(settings) as mem:
        console.rule("[bold]memstack demo")
        console.print(f"user [cyan]{user}[/cyan], session [cyan]{session}[/cyan]")
        for day, role, text in script:
            msg_id = await mem.remember(user, session, role, text, ts=start + day * DAY)
            console.print(f"[dim]{msg_id}[/dim]  {role:9} {text}")
        await mem.set_state(
            user, session, {"current_step": "shortlist", "last_user_intent": "budget"}
        )

        table = Table(title="Working memory: window (Redis)")
        for col in ("msg_id", "role", "content"):
            table.add_column(col)
        for m in await mem.window(user, session):
            table.add_row(m.msg_id, m.role, m.content)
        console.print(table)
        state = await mem.get_state(user, session)
        console.print(f"state: turns={state.turns} fields={state.fields}")

        report = await mem.drain()
        console.print(
            f"ingest worker (in-process): {report.processed} jobs → ledger, vectors, facts"
        )
        facts = Table(title="Fact memory: history of every key (current rows in bold)")
        for col in ("key", "value", "source", "valid from", "valid until", "supersedes"):
            facts.add_column(col)
        for f in await mem.fact_history(user):
            style = "bold" if f.current else "dim"
            facts.add_row(
                f.key,
                json.dumps(f.value, ensure_ascii=False),
                f.source,
                f"{f.valid_from:%Y-%m-%d %H:%M}",
                f"{f.valid_until:%Y-%m-%d %H:%M}" if f.valid_until else "current",
                str(f.supersedes_id or ""),
                style=style,
            )
        console.print(facts)

        # The read path: the user comes back in a new session and asks about the budget.
        question = "What is my budget?" if locale == "en" else "我预算多少？"
        result = await mem.context(user, f"{session}-next", question, locale=locale)
        console.rule(f"[bold]context() for {question!r} (a new session)")
        console.print(result.text, markup=False, highlight=False)
        dropped: dict[str, int] = {}
        for item in result.manifest:
            if not item.kept and item.reason:
                dropped[item.reason] = dropped.get(item.reason, 0) + 1
        console.print(
            f"[dim]manifest: {len(result.kept())} items kept, dropped {dropped or 'none'}; "
            f"{result.tokens} tokens; degraded {result.degraded or 'none'}[/dim]"
        )
