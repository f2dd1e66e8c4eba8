from __future__ import annotations

import hashlib
import json
import math
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memstack.embedders import (
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    build_embedder,
    resolve_dim,
)
from memstack.errors import ConfigError, StoreUnavailable
from memstack.settings import load_settings


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _norm(v: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


# --- loopback OpenAI-compatible server -------------------------------------------------------

SERVER_DIM = 6


def raw_vector(text: str) -> list[float]:
    """Deterministic, deliberately unnormalised vector the fake server returns for ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(b) + 1.0 for b in digest[:SERVER_DIM]]


@dataclass
class FakeEmbeddingsServer:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_with: int | None = None


@pytest.fixture
def openai_server() -> Iterator[FakeEmbeddingsServer]:
    state = FakeEmbeddingsServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(
                {"path": self.path, "body": body, "auth": self.headers["Authorization"]}
            )
            if state.fail_with is not None:
                self.send_response(state.fail_with)
                self.end_headers()
                return
            inputs = body["input"]
            data = [
                {"object": "embedding", "index": i, "embedding": raw_vector(t)}
                for i, t in enumerate(inputs)
            ]
            # Out of order on purpose: clients must place items by `index`.
            payload = {
                "object": "list",
                "data": data[::-1],
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
            raw = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_openai_embedder_one_request_normalised_in_order(
    openai_server: FakeEmbeddingsServer,
) -> None:
    embedder = OpenAIEmbedder(base_url=openai_server.url, model="test-embed", api_key=None)
    texts = ["预算五千", "budget 5000", "weather"]
    vectors = await embedder.embed(texts)
    await embedder.aclose()

    assert len(openai_server.requests) == 1
    request = openai_server.requests[0]
    assert request["path"] == "/v1/embeddings"
    assert request["body"]["model"] == "test-embed"
    assert request["body"]["input"] == texts
    assert request["auth"] == "Bearer none"
    for text, vector in zip(texts, vectors, strict=True):
        raw = raw_vector(text)
        assert _norm(vector) == pytest.approx(1.0)
        assert vector == pytest.approx([x / _norm(raw) for x in raw])
    assert embedder.dim == SERVER_DIM
    assert embedder.model_version == "openai:test-embed"


async def test_openai_embedder_learns_dim_by_probe(openai_server: FakeEmbeddingsServer) -> None:
    embedder = OpenAIEmbedder(base_url=openai_server.url, model="m")
    with pytest.raises(ConfigError):
        _ = embedder.dim
    assert await resolve_dim(embedder) == SERVER_DIM
    assert await resolve_dim(embedder) == SERVER_DIM
    assert len(openai_server.requests) == 1  # the dimension is remembered
    await embedder.aclose()


async def test_openai_embedder_empty_input_makes_no_request(
    openai_server: FakeEmbeddingsServer,
) -> None:
    embedder = OpenAIEmbedder(base_url=openai_server.url, model="m")
    assert await embedder.embed([]) == []
    assert openai_server.requests == []


async def test_openai_embedder_server_error_is_store_unavailable(
    openai_server: FakeEmbeddingsServer,
) -> None:
    openai_server.fail_with = 503
    embedder = OpenAIEmbedder(base_url=openai_server.url, model="m", max_retries=0)
    with pytest.raises(StoreUnavailable) as info:
        await embedder.embed(["x"])
    assert info.value.__cause__ is not None
    await embedder.aclose()


async def test_openai_embedder_unreachable_is_store_unavailable() -> None:
    embedder = OpenAIEmbedder(
        base_url=f"http://127.0.0.1:{_free_port()}/v1", model="m", max_retries=0, timeout_s=2
    )
    with pytest.raises(StoreUnavailable, match="embeddings endpoint"):
        await embedder.embed(["x"])
    await embedder.aclose()


# --- hashing -------------------------------------------------------------------------------


async def test_hashing_is_deterministic_and_normalised() -> None:
    texts = ["我的预算是五千元", "My budget is 5000 dollars", ""]
    first = await HashingEmbedder(64).embed(texts)
    second = await HashingEmbedder(64).embed(texts)
    assert first == second
    assert all(len(v) == 64 and _norm(v) == pytest.approx(1.0) for v in first)
    assert HashingEmbedder(64).model_version == "hashing-v1-64"


@pytest.mark.parametrize(
    ("anchor", "similar", "unrelated"),
    [
        ("我的预算是五千元", "我的预算是八千元", "今天北京下雨了"),
        ("my laptop budget is 5000", "my laptop budgets are 5000", "the weather in Paris is rainy"),
    ],
    ids=["zh", "en"],
)
async def test_hashing_similar_texts_are_closer(anchor: str, similar: str, unrelated: str) -> None:
    a, s, u = await HashingEmbedder(384).embed([anchor, similar, unrelated])
    assert _cos(a, s) > 0.5
    assert _cos(a, s) > _cos(a, u) + 0.3
    assert a != s


def test_hashing_rejects_a_bad_dimension() -> None:
    with pytest.raises(ConfigError):
        HashingEmbedder(0)


# --- choice ---------------------------------------------------------------------------------


def test_build_embedder_follows_settings(tmp_path: Any) -> None:
    hashing = build_embedder(load_settings(embedder="hashing", embed_dim=32, home=tmp_path))
    assert isinstance(hashing, HashingEmbedder) and hashing.dim == 32
    assert isinstance(
        build_embedder(load_settings(embedder="minilm", home=tmp_path)), MiniLMEmbedder
    )
    remote = build_embedder(
        load_settings(
            embedder="openai", embed_url="http://127.0.0.1:9/v1", embed_model="e5", home=tmp_path
        )
    )
    assert isinstance(remote, OpenAIEmbedder) and remote.model_version == "openai:e5"


def test_importing_embedders_loads_no_model_library() -> None:
    heavy = "('torch', 'sentence_transformers', 'transformers')"
    code = f"import sys, memstack.embedders; print(sorted(m for m in {heavy} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# --- all-MiniLM-L6-v2 ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.mark.slow
async def test_minilm_vectors_are_384_normalised_and_distinct(minilm: MiniLMEmbedder) -> None:
    chunks = [
        "The user wants a light laptop with long battery life for commuting.",
        "Their budget was raised from 5000 to 8000 yuan last week.",
    ]
    vectors = await minilm.embed(chunks)
    assert minilm.dim == 384 and minilm.model_version == "all-MiniLM-L6-v2"
    assert [len(v) for v in vectors] == [384, 384]
    assert all(_norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert _cos(vectors[0], vectors[1]) < 0.9


@pytest.mark.slow
async def test_minilm_paraphrase_is_closer_than_unrelated(minilm: MiniLMEmbedder) -> None:
    anchor, paraphrase, unrelated = await minilm.embed(
        [
            "How much money can I spend on the new laptop?",
            "What is my budget for buying a notebook computer?",
            "The cat slept on the warm windowsill all afternoon.",
        ]
    )
    assert _cos(anchor, paraphrase) > _cos(anchor, unrelated) + 0.2


@pytest.mark.slow
async def test_minilm_model_is_loaded_once_per_process(minilm: MiniLMEmbedder) -> None:
    from memstack import embedders

    await minilm.embed(["warm up"])
    loaded = dict(embedders._models)
    other = MiniLMEmbedder()
    single = await other.embed(["warm up"])
    assert embedders._models == loaded and len(loaded) == 1
    batch = await other.embed(["warm up", "another text"])
    assert batch[0] == pytest.approx(single[0], abs=1e-5)  # batching does not change a vector
