"""Exchange units as the ledger defines them, whatever order their messages came in.

A unit's chunks are stored under its head's id (``head#0``, ``head#1``, …) and hold
the text of every member (:func:`memstack.text.chunking.exchange_units`). Which unit a
message belongs to depends on the messages just before it, so a message that reaches
the ledger late (a redelivered job, a second worker, a backdated ``ts``) can change its
neighbours' units: the reply that arrived first was a unit of its own until its user
turn came. Ingest therefore derives, for each new message, every unit whose head lies
within :data:`UNIT_LOOKBACK` of it, from the ledger rows around it, and reports the
messages in that range that are no longer heads: chunks stored under their ids are
stale. Done under the session lock (:func:`memstack.stores.sql.erasure.lock_sessions`), the last
derivation of a session sees every row committed before it, so replays and races end
in the chunks a single clean pass would write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession

from memstack.core.messages import Message
from memstack.stores.sql import ledger
from memstack.text.chunking import UNIT_LOOKBACK, exchange_units

# Rows read on each side of a new message: its own range of heads (UNIT_LOOKBACK each
# way) plus the lookback of the first of them and the replies of the last.
RADIUS = 2 * UNIT_LOOKBACK
# Extra rows read after a message, for the messages of the same batch that follow it.
SPAN = 32


@dataclass(frozen=True)
class Unit:
    """One exchange: its head (the first message, whose id its chunks carry), the
    members in ledger order (head first), and its text for embedding."""

    head: Message
    members: tuple[Message, ...]
    text: str


@dataclass
class Derivation:
    units: dict[str, Unit] = field(default_factory=dict)
    # Messages that are members of another message's unit: any chunk under their own
    # id is left from when they were not.
    absorbed: dict[str, Message] = field(default_factory=dict)
    # Heads of the units that hold the new messages themselves: the ones that changed
    # for sure (the others mostly did not).
    touched: set[str] = field(default_factory=set)


def units_of(rows: Sequence[Message]) -> list[Unit]:
    """The units of consecutive ledger rows of one session. Units at either edge may be
    cut short when ``rows`` does not start or end with the session."""
    by_id = {m.msg_id: m for m in rows}
    out = []
    for u in exchange_units(rows):
        members = tuple(by_id[i] for i in u.msg_ids)
        out.append(Unit(members[0], members, u.text))
    return out


def _add(derivation: Derivation, rows: list[Message], at: int) -> None:
    """Add the units whose head lies within UNIT_LOOKBACK of ``rows[at]``."""
    low, high = at - UNIT_LOOKBACK, at + UNIT_LOOKBACK
    index = {m.msg_id: i for i, m in enumerate(rows)}
    for unit in units_of(rows):
        if any(m.msg_id == rows[at].msg_id for m in unit.members):
            derivation.touched.add(unit.head.msg_id)
        if low <= index[unit.head.msg_id] <= high:
            derivation.units[unit.head.msg_id] = unit
            for m in unit.members[1:]:
                derivation.absorbed[m.msg_id] = m
        for m in unit.members[1:]:
            if low <= index[m.msg_id] <= high:
                derivation.absorbed[m.msg_id] = m


def _covers(piece: ledger.Slice, m: Message) -> int | None:
    """``m``'s index in ``piece`` if the piece holds RADIUS rows on each side of it (or
    the session ends first), else None."""
    at = next((i for i, x in enumerate(piece.rows) if x.msg_id == m.msg_id), None)
    if at is None:
        return None
    if (at >= RADIUS or piece.from_start) and (len(piece.rows) - 1 - at >= RADIUS or piece.to_end):
        return at
    return None


async def around(s: AsyncSession, messages: Sequence[Message]) -> Derivation:
    """The units that ``messages`` (already in the ledger) make or change.

    The messages of one batch are mostly consecutive in their session, so one read of
    the ledger serves many of them: each read takes RADIUS rows before a message and
    RADIUS + SPAN after it, and the messages it covers need no read of their own."""
    derivation = Derivation()
    read: dict[tuple[str, str], list[ledger.Slice]] = {}
    ordered = sorted(
        {m.msg_id: m for m in messages}.values(), key=lambda m: (m.created_at, m.msg_id)
    )
    for m in ordered:
        pieces = read.setdefault((m.user_id, m.session_id), [])
        for piece in pieces:
            at = _covers(piece, m)
            if at is not None:
                break
        else:
            piece = await ledger.around(s, m, before=RADIUS, after=RADIUS + SPAN)
            pieces.append(piece)
            at = _covers(piece, m)
        if at is not None:  # None: the message is not in the ledger (erased)
            _add(derivation, piece.rows, at)
    # A message can be a head in one neighbourhood's view and absorbed in none: only
    # heads of no unit are stale.
    for head in derivation.units:
        derivation.absorbed.pop(head, None)
    return derivation


async def of_session(
    s: AsyncSession, user_id: str, session_id: str, *, page: int = 512
) -> AsyncIterator[list[Unit]]:
    """Every unit of a session, a page of rows at a time (``memstack reindex``). The
    last unit of a page may go on in the next, so it waits for it."""
    carry: list[Message] = []
    offset = 0
    while True:
        rows = await ledger.session_page(s, user_id, session_id, offset=offset, limit=page)
        offset += len(rows)
        units = units_of(carry + rows)
        if len(rows) < page:
            if units:
                yield units
            return
        carry = list(units[-1].members)
        if units[:-1]:
            yield units[:-1]
