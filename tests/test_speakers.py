"""Only the user's own words become the user's facts: another named participant's
statements never do, through any entry point, and a name bound to the user does.
Services and embedded alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memstack import AsyncMemory, InvalidContent, Memory, NotFound, Settings, ValidationError
from memstack.core.identity import MAX_ALIASES
from memstack.eval.fact_cases import load_cases
from tests.conftest import _cleanup, new_id
from tests.test_api import serve

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
# Two people in one chat, both role "user": the user, and Tim beside them.
TURNS = (
    (None, "I live in Berlin and I'm vegetarian."),
    ("Tim", "I just moved to Lisbon."),
    ("Tim", "I'm allergic to peanuts and my budget is 900 dollars."),
    ("Tim", "我搬到杭州了，我对芒果过敏。"),
)


async def _chat(
    mem: AsyncMemory, user: str, session: str, turns: tuple[tuple[str | None, str], ...]
) -> None:
    for i, (name, text) in enumerate(turns):
        await mem.remember(user, session, "user", text, name=name, ts=T0 + timedelta(minutes=i))
    await mem.drain()  # summaries too: they must not quote Tim as the user either


def _facts(facts: list) -> dict:  # type: ignore[type-arg]
    return {f.key: f.value for f in facts}


async def test_another_speakers_statements_are_never_the_users_facts(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await _chat(mem, u, s, TURNS)
    assert _facts(await mem.facts(u)) == {"city": "Berlin", "diet": "vegetarian"}
    assert await mem.candidates(u, status="all") == []
    # Tim's words stay in the conversation, named: recall can still find them.
    stored = await mem.messages(u, s)
    assert [m.name for m in stored] == [None, "Tim", "Tim", "Tim"]


async def test_a_name_bound_to_the_user_is_the_user(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await _chat(mem, u, s, TURNS[:1])
    bound = await mem.set_identity(u, display_name="Sam", aliases=["ＴＩＭ "])
    assert bound.aliases == ("ＴＩＭ",)  # stripped, kept as given
    assert (await mem.identity(u)).names == frozenset({"sam", "tim"})
    await _chat(mem, u, s, TURNS[2:3])  # "Tim" matches the alias ignoring case and width
    facts = _facts(await mem.facts(u))
    assert facts["allergies"] == ["peanuts"] and facts["budget_limit"]["amount"] == 900


async def test_binding_names_refuses_bad_input_and_changes_nothing(mem: AsyncMemory) -> None:
    u = new_id("u")
    with pytest.raises(NotFound):  # nothing stored of this user yet
        await mem.set_identity(u, display_name="Sam")
    with pytest.raises(NotFound):
        await mem.identity(u)
    await _chat(mem, u, new_id("s"), TURNS[:1])
    await mem.set_identity(u, display_name="Sam", aliases=["S"])
    for kwargs in (
        {"display_name": "a: b"},
        {"display_name": "line\nbreak"},
        {"display_name": " "},
        {"display_name": "Sam", "aliases": ["sam"]},  # the display name again
        {"aliases": ["x", "X"]},
        {"aliases": "Sam"},
        {"aliases": [f"n{i}" for i in range(MAX_ALIASES + 1)]},
    ):
        with pytest.raises((ValidationError, InvalidContent)):
            await mem.set_identity(u, **kwargs)  # type: ignore[arg-type]
    assert (await mem.identity(u)).aliases == ("S",)


async def test_forgetting_the_user_forgets_their_names(mem: AsyncMemory) -> None:
    u = new_id("u")
    await _chat(mem, u, new_id("s"), TURNS[:1])
    await mem.set_identity(u, display_name="Sam", aliases=["Sammy"])
    await mem.forget_user(u)
    assert (await mem.identity(u)).names == frozenset()


async def test_over_http_another_speaker_is_not_the_user(any_settings: Settings) -> None:
    u, s = new_id("u"), new_id("s")
    async with serve(any_settings) as (client, _mem):
        for name, text in TURNS:
            body: dict[str, object] = {"role": "user", "content": text}
            if name:
                body["name"] = name
            r = await client.post(f"/v1/users/{u}/sessions/{s}/messages", json=body)
            assert r.status_code in (200, 201), r.text
        assert (await client.post("/v1/admin/drain")).status_code == 200
        facts = (await client.get(f"/v1/users/{u}/facts")).json()["facts"]
        assert {f["key"]: f["value"] for f in facts} == {"city": "Berlin", "diet": "vegetarian"}
        r = await client.put(f"/v1/users/{u}/identity", json={"display_name": "Tim", "aliases": []})
        assert r.status_code == 200, r.text
        await client.post(
            f"/v1/users/{u}/sessions/{s}/messages",
            json={"role": "user", "name": "Tim", "content": "I'm a nurse."},
        )
        await client.post("/v1/admin/drain")
        keys = {f["key"] for f in (await client.get(f"/v1/users/{u}/facts")).json()["facts"]}
        assert "occupation" in keys


def test_llama_index_authors_keep_their_names(any_settings: Settings) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    from memstack.integrations.llama_index import MemstackMemory

    mem = Memory(any_settings)
    try:
        u, s = new_id("u"), new_id("s")
        memory = MemstackMemory(mem, user_id=u, session_id=s)
        memory.put(ChatMessage(role=MessageRole.USER, content="I live in Porto."))
        memory.put(
            ChatMessage(
                role=MessageRole.USER,
                content="I live in Oslo and I'm a pilot.",
                additional_kwargs={"name": "Tim"},
            )
        )
        mem.drain(summarize=False)
        assert {f.key: f.value for f in mem.facts(u)} == {"city": "Porto"}
    finally:
        mem._run(_cleanup(mem.aio))
        mem.close()


async def test_no_other_speakers_turn_of_the_labelled_cases_gives_the_user_a_fact(
    embedded_settings: Settings,
) -> None:
    """Every turn of another named participant in eval-data/facts (hundreds, by many
    writers, in both languages), said on its own: the user gets no fact and no candidate."""
    turns = [
        (case.id, turn)
        for path in sorted(Path(__file__).parents[1].glob("eval-data/facts/*.jsonl"))
        for case in load_cases(path)
        for turn in case.messages
        if turn.role == "user" and turn.name and turn.name not in case.identity
    ]
    assert len(turns) > 200
    async with await AsyncMemory.open(embedded_settings) as m:
        u = new_id("u")
        for i, (case_id, turn) in enumerate(turns):
            await m.remember(
                u, case_id, "user", turn.text, name=turn.name, ts=T0 + timedelta(minutes=i)
            )
        await m.drain(summarize=False)
        assert await m.facts(u) == [] and await m.candidates(u, status="all") == []
        assert len(await m.messages(u, turns[0][0])) >= 1  # said, kept, not the user's
