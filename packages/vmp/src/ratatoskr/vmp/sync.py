"""Bringing what a store holds in memory — the vectors (:mod:`ratatoskr.vmp.index`) and
which records have metadata (:mod:`ratatoskr.vmp.tagged`) — to the file's state.

Run inside a read transaction: it loads the rows another process appended, reloads
everything after a restore (another epoch), and catches the metadata flags up, by
one record when they are one update behind.
"""

from __future__ import annotations

import apsw

from ratatoskr.vmp.index import ExactIndex, IndexView, Int32Matrix
from ratatoskr.vmp.queries import (
    counters,
    last_metadata_change,
    metadata_flags,
    records_with_metadata,
    vector_rows,
)
from ratatoskr.vmp.tagged import MetadataFlags


def sync_held(conn: apsw.Connection, index: ExactIndex, flags: MetadataFlags) -> IndexView:
    """Inside a read transaction: ``index`` and ``flags`` brought to the file's state,
    loading what is missing; the view of every record."""
    next_record, _, epoch, version = counters(conn)

    def load(start: int, stop: int) -> Int32Matrix:
        return vector_rows(conn, start, stop, index.dim)

    view = index.view(epoch, next_record, load)
    _sync_flags(conn, flags, epoch, version, next_record)
    return view


def _sync_flags(
    conn: apsw.Connection, flags: MetadataFlags, epoch: int, version: int, next_record: int
) -> None:
    held = flags.covers(epoch, version)
    if held is None and flags.covers(epoch, version - 1) is not None:
        # One metadata update behind (another process's): read that one record.
        changed = last_metadata_change(conn)
        if changed is not None:
            flags.step(epoch, version, *changed)
            held = flags.covers(epoch, version)
    if held is not None and held < next_record:  # records another process appended
        flags.extend(epoch, version, held, metadata_flags(conn, held, next_record))
    elif held != next_record and flags.may_reload(next_record):
        # Another epoch, or several metadata updates of another process: every
        # flag anew (rate-limited, see MetadataFlags.may_reload; until then the
        # general route, which reads its hits' metadata, answers).
        flags.load(epoch, version, next_record, records_with_metadata(conn))
