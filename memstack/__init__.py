"""memstack: layered memory for long-running AI agents.

Redis holds what is happening now, PostgreSQL the facts that must be exact, a vector
store what may be said another way; a session knowledge cache keeps good retrievals.
"""

from memstack.errors import MemstackError
from memstack.memory import AsyncMemory
from memstack.settings import Settings, load_settings
from memstack.sync import Memory

__all__ = ["AsyncMemory", "Memory", "MemstackError", "Settings", "load_settings"]
__version__ = "0.1.0"
