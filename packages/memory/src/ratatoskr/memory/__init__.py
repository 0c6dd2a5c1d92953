"""Ratatoskr's memory plane: the durable SQLite + sqlite-vec chunk store.

``open_memory_store(db_path, *, embedding_dim)`` returns a ``SqliteMemoryStore``
(``RatatoskrMemoryStore`` is its former name, kept; it is made from a ``Database``
and its ``MemoryLimits``) implementing bifrost's ``MemoryDataStore``;
``build_memory_provider_app(store, heimdall_key)`` hands it to bifrost's memory app;
``compact_memory_file(db_path)`` gives a file's unused space back (an operator's
command, beside a serving provider).
"""

from ratatoskr.memory.app import build_memory_provider_app
from ratatoskr.memory.limits import MemoryLimits
from ratatoskr.memory.store import (
    RatatoskrMemoryStore,
    SqliteMemoryStore,
    compact_memory_file,
    open_memory_store,
)

__all__ = [
    "MemoryLimits",
    "RatatoskrMemoryStore",
    "SqliteMemoryStore",
    "build_memory_provider_app",
    "compact_memory_file",
    "open_memory_store",
]
