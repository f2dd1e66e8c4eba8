"""The int8 copy of MiniLM's ONNX export that embeds queries."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from memstack.core.errors import ModelUnavailable
from memstack.ml.embedders.minilm_export import _EXPORT_PROBES, _publish, _temp_beside
from memstack.ml.embedders.onnx import _OnnxEncoder, onnx_session

if TYPE_CHECKING:
    from tokenizers import Tokenizer


# Queries go through a copy of the export with int8 weights (dynamic quantisation, per
# output channel). One query is a few tokens, so a pass is bound by reading the weights,
# which int8 makes a quarter of the size: ~8 instead of ~14 ms of CPU per query here.
# Stored vectors stay float32; the copy is published only if it stays this close to
# them on the probes. Per-channel int8 measured 0.987-0.995 on sentences and 0.957 on
# "ok" (activations of a two-token text quantise worst); LoCoMo dev evidence recall
# was 0.751 with int8 queries against 0.746 with float32 ones.
_QUERY_MIN_COSINE = 0.94


def onnx_query_path(export: Path) -> Path:
    """Cache file of the int8 copy of ``export`` that embeds queries."""
    return export.with_name(f"{export.stem}-int8.onnx")


def _quantize_onnx(export: Path, full: _OnnxEncoder, path: Path, tokenizer: Tokenizer) -> None:
    """Write the int8 copy of ``export`` (loaded as ``full``) to ``path`` once it passes
    the probes, atomically, as :func:`_export_onnx` publishes the export."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = _temp_beside(path)
    published = False
    # The quantiser logs its progress, and advice meant for static quantisation, on the
    # root logger: noise in an application's log.
    quiet = _DropRecords(str(Path(quantize_dynamic.__code__.co_filename).parent))
    logging.getLogger().addFilter(quiet)
    try:
        quantize_dynamic(str(export), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        probes = list(_EXPORT_PROBES)
        expected = full.encode(probes, len(probes))
        got = _OnnxEncoder(onnx_session(tmp), tokenizer).encode(probes, len(probes))
        worst = float((expected * got).sum(axis=1).min())
        if not worst >= _QUERY_MIN_COSINE:  # `not >=` so that NaN fails too
            raise ModelUnavailable(f"the int8 copy is too far from float32 (cosine {worst:.4f})")
        _publish(tmp, path)
        published = True
    finally:
        logging.getLogger().removeFilter(quiet)
        if not published:
            tmp.unlink(missing_ok=True)


class _DropRecords(logging.Filter):
    """Drops the records logged from the modules of one folder."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.startswith(self.folder)
