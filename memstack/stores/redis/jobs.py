"""Ingest jobs: the stream entries the write script queues, and reading them back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from memstack.core.errors import ValidationError
from memstack.core.ids import validate_id
from memstack.core.messages import ROLES, Message, validate_name
from memstack.core.time import from_ms
from memstack.types import DeadLetter as DeadLetter


@dataclass(frozen=True)
class Job:
    """One stream entry; ``fields`` are the write script's (msg_id, user_id, …)."""

    entry_id: str
    fields: Mapping[str, str]
    deliveries: int = 1
    # The stream it was read from ("": the queue's first, the only one on one Redis).
    stream: str = ""


def text_of(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def accepted_at(job: Job) -> datetime | None:
    """When Redis accepted the job: the write script's ``accepted_us``, else (a job
    queued before it recorded one) the stream entry's time."""
    raw = job.fields.get("accepted_us")
    try:
        micros = int(raw) if raw else entry_order(job.entry_id)[0] * 1000
    except ValueError:
        return None
    return datetime.fromtimestamp(micros / 1_000_000, tz=UTC)


@dataclass(frozen=True)
class Wanted:
    """Which jobs a drop or a lookup is about: a user's, of one session, of one message."""

    user_id: str
    session_id: str | None
    msg_id: str | None

    def matches(self, fields: Mapping[str, str]) -> bool:
        return (
            fields.get("user_id") == self.user_id
            and self.session_id in (None, fields.get("session_id"))
            and self.msg_id in (None, fields.get("msg_id"))
        )


def job_fields(
    *,
    msg_id: str,
    user_id: str,
    session_id: str,
    role: str,
    content: str,
    ts_ms: int,
    name: str | None,
    accepted_us: int,
) -> dict[str, str]:
    """A message's stream entry as the write script writes it: the message's time in
    epoch milliseconds, when it was accepted in microseconds, ``name`` only when set."""
    fields = {
        "msg_id": msg_id,
        "user_id": user_id,
        "session_id": session_id,
        "role": role,
        "content": content,
        "ts_ms": str(ts_ms),
        "accepted_us": str(accepted_us),
    }
    return fields if name is None else {**fields, "name": name}


def message_from_job(job: Job) -> Message:
    """Validate a stream entry; a malformed one raises and ends in the dead-letter stream."""
    f = job.fields
    try:
        msg_id, user_id, session_id = f["msg_id"], f["user_id"], f["session_id"]
        role, content, ts_ms = f["role"], f["content"], int(f["ts_ms"])
    except (KeyError, ValueError) as exc:
        raise ValidationError(f"malformed ingest job {job.entry_id}: {exc!r}") from exc
    validate_id("user_id", user_id)
    validate_id("session_id", session_id)
    if role not in ROLES or not content.strip():
        raise ValidationError(f"malformed ingest job {job.entry_id}: role {role!r} / empty content")
    try:
        # Jobs queued before names existed have no "name"; "" also means none.
        name = validate_name(f.get("name") or None)
    except ValidationError as exc:
        raise ValidationError(f"malformed ingest job {job.entry_id}: {exc}") from exc
    return Message(
        msg_id,
        user_id,
        session_id,
        role,
        content,
        from_ms(ts_ms),
        name,
        accepted_at(job),
    )
