"""BERT transformers in ONNX Runtime sessions, shared by the ONNX-based models
(MiniLM's export, the packaged bge-small graph, the re-ranker): the session, the
tokenizer, the inputs of a batch and the pooling of its outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstack.core.errors import ModelUnavailable
from memstack.ml.embedders.minilm_model import MINILM_DIM

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer


_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_ONNX_OUTPUT = "last_hidden_state"


def bert_tokenizer(model_dir: Path, max_length: int) -> Tokenizer:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception
        raise ModelUnavailable(f"cannot read {model_dir / 'tokenizer.json'}: {exc}") from exc
    # tokenizer.json truncates and pads every text to 128 tokens; sentence-transformers
    # overrides both (truncation at max_seq_length, padding to the batch's longest), and
    # the vectors are only the same if the tokens are.
    padding = tokenizer.padding or {}
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(
        pad_id=int(padding.get("pad_id", 0)),
        pad_type_id=int(padding.get("pad_type_id", 0)),
        pad_token=str(padding.get("pad_token", "[PAD]")),
    )
    return tokenizer


def _mean_pool_normalise(
    hidden: NDArray[np.float32], attention_mask: NDArray[np.int64]
) -> NDArray[np.float32]:
    """sentence-transformers' Pooling(mean) then Normalize, with their epsilons."""
    import numpy as np

    mask = attention_mask[:, :, None].astype(np.float32)
    pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    normalised: NDArray[np.float32] = pooled / np.maximum(norms, 1e-12)
    return normalised


def bert_feed(encodings: Sequence[Any]) -> dict[str, NDArray[np.int64]]:
    """A BERT graph's three inputs for one padded batch of ``tokenizers`` encodings."""
    import numpy as np

    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


Pooling = Callable[["NDArray[np.float32]", "NDArray[np.int64]"], "NDArray[np.float32]"]


def _cls_normalise(
    hidden: NDArray[np.float32], attention_mask: NDArray[np.int64]
) -> NDArray[np.float32]:
    """BGE's pooling: the [CLS] token's state, normalised."""
    import numpy as np

    cls = hidden[:, 0]
    normalised: NDArray[np.float32] = cls / np.maximum(
        np.linalg.norm(cls, axis=1, keepdims=True), 1e-12
    )
    return normalised


class _OnnxEncoder:
    """A BERT transformer in an ONNX Runtime session, with the model's tokenizer and
    pooling (MiniLM's export, or the packaged BGE graph)."""

    def __init__(
        self, session: Any, tokenizer: Tokenizer, pool: Pooling = _mean_pool_normalise
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._pool = pool

    def encode(self, texts: Sequence[str], batch_size: int) -> NDArray[np.float32]:
        import numpy as np

        out = np.empty((len(texts), MINILM_DIM), dtype=np.float32)
        # Longest first, as sentence-transformers does: texts of similar length share a
        # batch, so little of it is padding.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            feed = bert_feed(self._tokenizer.encode_batch([texts[i] for i in rows]))
            hidden = self._session.run([_ONNX_OUTPUT], feed)[0]
            out[rows] = self._pool(hidden, feed["attention_mask"])
        return out


def onnx_session(
    path: Path, what: str = "MiniLM export", output: str = _ONNX_OUTPUT, width: int = MINILM_DIM
) -> Any:
    """A CPU session of ``path``, checked to take BERT's inputs and give ``output``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    # ONNX Runtime's worker threads spin while waiting for work by default, which takes
    # the cores from the event loop and the store threads of the same context() call:
    # with spinning off, context() at 10k chunks measured p50 40.1 / p99 51.9 ms against
    # 49.4 / 63.1 (benchmarks/context.py, back to back; docs/benchmarks.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own, untyped exception classes
        raise ModelUnavailable(f"cannot load the ONNX model {path}: {exc}") from exc
    inputs = sorted(i.name for i in session.get_inputs())
    outputs = session.get_outputs()
    if inputs != sorted(_ONNX_INPUTS) or [o.name for o in outputs] != [output]:
        raise ModelUnavailable(f"{path} is not a {what}: inputs {inputs}")
    if outputs[0].shape[-1] != width:
        raise ModelUnavailable(f"{path} is not a {what}: output {outputs[0].shape}")
    return session
