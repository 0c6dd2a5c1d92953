"""Ratatoskr's affect plane: a blind SQLite conduit for Worldtree's affect state.

``open_affect_store(db_path)`` returns a ``SqliteAffectStore``
(``RatatoskrAffectStore`` is its former name, kept) implementing bifrost's
``AffectDataStore`` (every revision of a key kept as history until the key is
deleted); ``build_affect_provider_app(store, heimdall_key)`` hands it to
bifrost's affect app.
"""

from ratatoskr.affect.app import build_affect_provider_app
from ratatoskr.affect.store import RatatoskrAffectStore, SqliteAffectStore, open_affect_store

__all__ = [
    "RatatoskrAffectStore",
    "SqliteAffectStore",
    "build_affect_provider_app",
    "open_affect_store",
]
