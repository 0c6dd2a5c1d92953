"""Typed storage errors of the SQLite backend: the one hierarchy every backend
raises (``ratatoskr.storage.errors``), under the names this package always had.

SQLite's own exceptions carry file paths and sometimes SQL text; these carry a
short, content-free message so a plane can surface them without leaking data
(``ratatoskr.sqlite.driver.translate_errors`` maps apsw's onto them).
"""

from __future__ import annotations

from ratatoskr.storage import errors as _shared
from ratatoskr.storage.errors import *  # noqa: F403  (the shared classes, under this package's name)

__all__: list[str] = []
__all__ += _shared.__all__
