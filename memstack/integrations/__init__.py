"""Adapters that plug memstack into agent frameworks (LlamaIndex, LangGraph)."""
