"""The recall datasets, read from where they lie: LoCoMo and LongMemEval as conversations
of :class:`memstack.Message`, with their questions and evidence as stored message ids.
Nothing of the data is stored in the project."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from memstack import Message
from memstack.core.errors import ValidationError
from memstack.core.ids import scoped_msg_id

Dataset = Literal["locomo", "longmemeval"]
# LoCoMo category 5 (adversarial) questions have no answer in the conversation.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Seconds between consecutive turns of a session whose turns carry no time of their own.
TURN_SPACING_S = 30


@dataclass(frozen=True)
class Session:
    session_id: str
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class Question:
    text: str
    category: str
    now: datetime
    evidence: tuple[str, ...]  # stored msg ids
    group: str = ""  # what per-group figures are per: a conversation, a question type


@dataclass(frozen=True)
class Conversation:
    user_id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    missing_evidence: int = 0
    # The name the user's messages are written under, bound with set_identity.
    user_name: str | None = None


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise ValidationError(f"no data file at {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:@-]", "_", text)[:60]


def _locomo_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _category(value: object) -> str | None:
    """A LoCoMo category by number, or named by a set in LoCoMo's format (our Chinese
    set: "paraphrase", "cross-language", ...); None for the unanswerable ones."""
    if isinstance(value, str) and value:
        return value
    return LOCOMO_CATEGORIES.get(value) if isinstance(value, int) else None


def locomo(path: Path, run_id: str) -> Iterator[Conversation]:
    """LoCoMo: speaker A plays the user, speaker B the assistant, each message named by
    its speaker (the questions name people); content keeps the caption of a shared image."""
    for sample in _load_json(path):
        conv = sample["conversation"]
        speaker_a = conv["speaker_a"]
        user_id = f"{run_id}-{_safe(sample['sample_id'])}"
        numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        sessions = []
        stored: dict[str, str] = {}
        last = None
        for n in numbers:
            start = _locomo_time(conv[f"session_{n}_date_time"])
            sid = f"{user_id}-s{n}"
            msgs = []
            for i, turn in enumerate(conv[f"session_{n}"]):
                content = turn["text"]
                if turn.get("blip_caption"):
                    content += f" [shares {turn['blip_caption']}]"
                role = "user" if turn["speaker"] == speaker_a else "assistant"
                ts = start + timedelta(seconds=TURN_SPACING_S * i)
                msgs.append(
                    Message(turn["dia_id"], user_id, sid, role, content, ts, turn["speaker"])
                )
                stored[turn["dia_id"]] = scoped_msg_id(user_id, sid, turn["dia_id"])
                last = ts
            sessions.append(Session(sid, tuple(msgs)))
        assert last is not None
        # The questions carry no date: they are asked the day after the last session.
        now = last + timedelta(days=1)
        questions = []
        missing = 0
        for qa in sample["qa"]:
            category = _category(qa.get("category"))
            if category is None:
                continue
            evidence = []
            for ref in qa.get("evidence", []):
                # A few references are malformed ("D8:6; D9:17", "D:11:26").
                for part in str(ref).split(";"):
                    dia = part.strip().replace("D:", "D")
                    if dia in stored:
                        evidence.append(stored[dia])
                    else:
                        missing += 1
            if evidence:
                questions.append(
                    Question(
                        qa["question"],
                        category,
                        now,
                        tuple(dict.fromkeys(evidence)),
                        str(sample["sample_id"]),
                    )
                )
        yield Conversation(user_id, tuple(sessions), tuple(questions), missing, speaker_a)


def _lme_time(text: str) -> datetime:
    return datetime.strptime(
        text.split(" (")[0] + " " + text.split(") ")[-1], "%Y/%m/%d %H:%M"
    ).replace(tzinfo=UTC)


def longmemeval(path: Path, run_id: str) -> Iterator[Conversation]:
    """LongMemEval_S: each question is its own user with its own haystack of sessions;
    evidence is every turn marked ``has_answer``."""
    for item in _load_json(path):
        user_id = f"{run_id}-{_safe(str(item['question_id']))}"
        sessions = []
        evidence: list[str] = []
        for sid_raw, date, turns in zip(
            item["haystack_session_ids"],
            item["haystack_dates"],
            item["haystack_sessions"],
            strict=True,
        ):
            sid = f"{user_id}-{_safe(sid_raw)}"
            start = _lme_time(date)
            msgs = []
            for i, turn in enumerate(turns):
                caller = f"t{i}"
                if not str(turn.get("content", "")).strip():
                    continue
                msgs.append(
                    Message(
                        caller,
                        user_id,
                        sid,
                        turn["role"],
                        turn["content"],
                        start + timedelta(seconds=TURN_SPACING_S * i),
                    )
                )
                if turn.get("has_answer"):
                    evidence.append(scoped_msg_id(user_id, sid, caller))
            sessions.append(Session(sid, tuple(msgs)))
        question = Question(
            item["question"],
            item["question_type"],
            _lme_time(item["question_date"]),
            tuple(evidence),
            item["question_type"],
        )
        yield Conversation(user_id, tuple(sessions), (question,) if evidence else ())


LOADERS: dict[str, Callable[[Path, str], Iterator[Conversation]]] = {
    "locomo": locomo,
    "longmemeval": longmemeval,
}
