#!/usr/bin/env bash
# One-command setup: a virtualenv in .venv with memstack, its dev tools and the framework
# integrations (LangGraph, LlamaIndex) their tests need.
# torch is installed first from its CPU pin; a plain `torch` requirement would pull a
# multi-GB CUDA build through sentence-transformers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements/torch.txt
.venv/bin/python -m pip install -q -e ".[dev,langgraph,llama-index]"
echo "memstack installed in .venv — try: .venv/bin/memstack demo"
