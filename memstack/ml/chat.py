"""One OpenAI-compatible chat endpoint asked for JSON: bounded, validated, and skipped
while it is known to hang.

Whatever comes back is distrusted: a body over :data:`MAX_RESPONSE_BYTES` is refused
while it is still arriving, before anything parses it; a body that is not an OpenAI chat
completion (an HTML error page with status 200, a truncated answer) is an error; JSON
nested too deep to parse is malformed output, not a crash. A call that times out (or
cannot connect) opens a process-local circuit breaker shared by every client of the
same endpoint built from the settings: for :data:`BACKOFF_S` seconds the endpoint is not
called at all and the callers' offline fallbacks answer at once, so a hanging LLM costs
one timeout per back-off, not one per message or per redelivered job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import openai

from memstack.core.errors import ExtractionError
from memstack.core.inputs import safe_text

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

    from memstack.core.settings import Settings

log = logging.getLogger("memstack.ingest.extraction")
T = TypeVar("T")

# Largest response body read from the endpoint (decoded bytes): a batch of sixteen
# messages' facts is a few KB; anything near this is not an answer.
MAX_RESPONSE_BYTES = 256 * 1024
# Seconds an endpoint is skipped after it timed out or refused the connection.
BACKOFF_S = 30.0


class LLMCallFailed(ExtractionError):
    """No usable answer; ``reason`` is one of skipped, timeout, oversized, error, malformed."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class LLMStats:
    """Counters for the metrics exporter; plain ints so nothing registers at import."""

    calls: int = 0  # requests sent, retries included
    retries: int = 0  # second attempts after malformed output
    malformed: int = 0  # answers that failed JSON parsing or validation
    timeouts: int = 0  # requests that ran out of time
    errors: int = 0  # connection errors, error statuses, bodies that are not completions
    fallbacks: int = 0  # results served by the offline fallback instead
    oversized: int = 0  # bodies refused for their size before parsing
    skipped: int = 0  # calls not made because the endpoint timed out moments ago
    dropped_facts: int = 0  # facts in usable answers dropped by validation


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def json_payload(content: str) -> Any:
    """The JSON object in a model's answer, tolerating ```json fences and prose around it.
    ValueError when there is none, or when it nests too deep for the parser."""
    m = _FENCE.search(content)
    text = (m.group(1) if m else content).strip()
    if not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise ValueError("no JSON object in the answer")
        text = text[start : end + 1]
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("the JSON in the answer is nested too deep to read") from None


@dataclass
class Breaker:
    """Open for ``backoff_s`` after a timeout; while open, no call is made."""

    backoff_s: float = BACKOFF_S
    open_until: float = 0.0

    def is_open(self) -> bool:
        return time.monotonic() < self.open_until

    def trip(self) -> None:
        self.open_until = time.monotonic() + self.backoff_s


_BREAKERS: dict[str, Breaker] = {}


def shared_breaker(base_url: str) -> Breaker:
    """The breaker of ``base_url`` in this process (the extractor and the summariser of
    one endpoint see the same outage)."""
    return _BREAKERS.setdefault(base_url.rstrip("/"), Breaker())


class _Oversized(Exception):
    pass


class _NotACompletion(Exception):
    pass


def _completion_content(body: bytes) -> str:
    """The first choice's message content of an OpenAI chat completion body."""
    try:
        envelope = json.loads(body)
    except (ValueError, RecursionError):
        raise _NotACompletion(f"the body is not JSON: {safe_text(body[:80], 80)}") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("choices"), list):
        raise _NotACompletion("the body is not a chat completion (no choices)")
    choices = envelope["choices"]
    if not choices:
        return ""
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if content is not None and not isinstance(content, str):
        raise _NotACompletion("the completion's content is not text")
    return content or ""


class ChatJSON:
    """One OpenAI-compatible chat endpoint asked for JSON, with the retry policy.

    Malformed output gets one retry that shows the model its mistake; a timeout, a
    connection error or a body that is not a completion gets none, because the fallback
    answers faster than a second wait. Both attempts share one deadline of
    ``timeout_s``. Either way the caller receives :class:`ExtractionError` and falls back.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 20.0,
        json_mode: bool = False,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        breaker: Breaker | None = None,
    ) -> None:
        self.model = model
        self.timeout_s = timeout_s
        # Off by default: not every OpenAI-compatible server accepts response_format.
        self.json_mode = json_mode
        self.max_response_bytes = max_response_bytes
        self.breaker = breaker or Breaker()
        self.stats = LLMStats()
        # The deadline below is what times a call out; the SDK's own timeout is a backstop.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "none", timeout=timeout_s + 5, max_retries=0
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatJSON:
        if not settings.llm_url:
            raise ExtractionError("no LLM endpoint configured (MEMSTACK_LLM_URL)")
        return cls(
            base_url=settings.llm_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key,
            timeout_s=settings.llm_timeout_s,
            breaker=shared_breaker(settings.llm_url),
        )

    async def complete(self, system: str, user: str, parse: Callable[[str], T]) -> T:
        """``parse`` of the model's answer; :class:`ExtractionError` when there is none
        within ``timeout_s`` (one retry for malformed output included)."""
        if self.breaker.is_open():
            self.stats.skipped += 1
            raise LLMCallFailed(
                "skipped", "LLM skipped: it timed out or refused a connection moments ago"
            )
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._attempts(messages, parse)
        except TimeoutError as exc:
            self.stats.timeouts += 1
            self.breaker.trip()
            raise LLMCallFailed("timeout", f"LLM call timed out after {self.timeout_s}s") from exc

    async def _attempts(
        self, messages: list[ChatCompletionMessageParam], parse: Callable[[str], T]
    ) -> T:
        for attempt in (1, 2):
            content = await self._ask(messages)
            try:
                return parse(content)
            except (ValueError, RecursionError) as exc:  # JSON and pydantic errors
                self.stats.malformed += 1
                if attempt == 2:
                    raise LLMCallFailed(
                        "malformed", f"LLM output unusable twice: {safe_text(exc)}"
                    ) from None
                self.stats.retries += 1
                messages = [
                    *messages,
                    {"role": "assistant", "content": safe_text(content, 4000)},
                    {
                        "role": "user",
                        "content": f"That answer was not usable ({safe_text(exc)}). "
                        "Reply again with only the JSON object described above.",
                    },
                ]
        raise AssertionError("unreachable")

    async def _ask(self, messages: list[ChatCompletionMessageParam]) -> str:
        self.stats.calls += 1
        extra: dict[str, Any] = (
            {"response_format": {"type": "json_object"}} if self.json_mode else {}
        )
        try:
            body = await self._read(messages, extra)
            return _completion_content(body)
        except _Oversized as exc:
            self.stats.oversized += 1
            raise LLMCallFailed("oversized", f"LLM answer refused: {exc}") from None
        except _NotACompletion as exc:
            self.stats.errors += 1
            raise LLMCallFailed(
                "error", f"LLM endpoint answered with no completion: {exc}"
            ) from None
        except openai.APITimeoutError as exc:
            raise TimeoutError from exc
        except (openai.APIConnectionError, ConnectionError) as exc:
            self.stats.errors += 1
            self.breaker.trip()
            raise LLMCallFailed("error", f"LLM endpoint unreachable: {safe_text(exc)}") from exc
        except openai.OpenAIError as exc:
            self.stats.errors += 1
            raise LLMCallFailed("error", f"LLM endpoint failed: {safe_text(exc)}") from exc
        except Exception as exc:  # the transport's own errors: a body cut short, a bad header
            self.stats.errors += 1
            raise LLMCallFailed(
                "error", f"LLM endpoint failed: {type(exc).__name__}: {safe_text(exc)}"
            ) from exc

    async def _read(
        self, messages: list[ChatCompletionMessageParam], extra: dict[str, Any]
    ) -> bytes:
        """The response body, refused as soon as it is known to exceed the limit."""
        limit = self.max_response_bytes
        stream = self._client.chat.completions.with_streaming_response
        async with stream.create(
            model=self.model, messages=messages, temperature=0, **extra
        ) as resp:
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _Oversized(f"a body of {declared} bytes; the limit is {limit}")
            body = bytearray()
            async for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > limit:
                    raise _Oversized(f"a body over {limit} bytes")
        return bytes(body)

    async def aclose(self) -> None:
        await self._client.close()
