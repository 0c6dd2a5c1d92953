"""The statements that read the VMP tables: counters, nodes, rows and the whole state.

Each takes the connection of a transaction (or the probe, in autocommit: one
statement reads one snapshot) and returns plain values.
"""

from __future__ import annotations

import functools
from typing import Any

import apsw
import numpy as np

from ratatoskr.sqlite import codec
from ratatoskr.vmp.errors import InternalError
from ratatoskr.vmp.index import Int32Matrix
from ratatoskr.vmp.snapshot import EdgeRow, NodeRow, RecordRow, VmpState

# (next_record_id, epoch, metadata_changes): what proves a held state the file's.
ProbeState = tuple[int, int, int]


def counters(conn: apsw.Connection) -> tuple[int, int, int, int]:
    """``next_record_id``, ``next_node_id``, ``epoch``, ``metadata_changes``."""
    row = conn.execute(
        "SELECT next_record_id, next_node_id, epoch, metadata_changes FROM vmp_state WHERE id = 0"
    ).fetchall()[0]
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])  # type: ignore[arg-type]


def probe_state(conn: apsw.Connection) -> ProbeState:
    """``next_record_id``, ``epoch``, ``metadata_changes``: what proves the held state."""
    for row in conn.execute(
        "SELECT next_record_id, epoch, metadata_changes FROM vmp_state WHERE id = 0"
    ):
        return int(row[0]), int(row[1]), int(row[2])
    raise InternalError("the store's counters are missing")


def last_metadata_change(conn: apsw.Connection) -> tuple[int, bool] | None:
    """The record of the last metadata update (migration 2's trigger) and whether it
    has metadata now; None when no update was recorded."""
    rows = conn.execute(
        "SELECT s.metadata_changed_record, r.metadata IS NOT NULL FROM vmp_state AS s"
        " LEFT JOIN vmp_records AS r ON r.record_id = s.metadata_changed_record"
        " WHERE s.id = 0 AND s.metadata_changed_record IS NOT NULL"
    ).fetchall()
    if not rows:
        return None
    record_id, tagged = rows[0]
    return int(record_id), bool(tagged)  # type: ignore[arg-type]


def metadata_flags(conn: apsw.Connection, start: int, stop: int) -> list[bool]:
    """Whether each record ``start … stop-1`` has metadata."""
    return [
        bool(row[0])
        for row in conn.execute(
            "SELECT metadata IS NOT NULL FROM vmp_records"
            " WHERE record_id >= ? AND record_id < ? ORDER BY record_id",
            (start, stop),
        )
    ]


def records_with_metadata(conn: apsw.Connection) -> list[int]:
    """Every record that has metadata (the partial index of migration 2)."""
    return [
        int(row[0])
        for row in conn.execute("SELECT record_id FROM vmp_records WHERE metadata IS NOT NULL")
    ]


@functools.cache
def _search_sql(hits: int) -> str:
    """The counters (tag 0) and the metadata of ``hits`` records (tag 1), in one statement:
    one snapshot, one round through SQLite."""
    marks = ",".join("?" * hits)
    return (
        "SELECT 0, next_record_id, epoch, metadata_changes FROM vmp_state WHERE id = 0"
        " UNION ALL SELECT 1, record_id, metadata, NULL FROM vmp_records"
        f" WHERE record_id IN ({marks})"
    )


def hits_metadata(
    conn: apsw.Connection, top: list[tuple[int, int]]
) -> tuple[ProbeState, dict[int, Any]]:
    """``(next_record_id, epoch, metadata_changes)`` and the non-null metadata of the
    ``top`` records."""
    state = (-1, -1, -1)
    metadata: dict[int, Any] = {}
    for tag, number, value, changes in conn.execute(_search_sql(len(top)), [rid for rid, _ in top]):
        if not tag:
            state = (int(number), int(value), int(changes))
        elif value is not None:
            metadata[int(number)] = codec.loads(str(value))
    return state, metadata


def node_kind(conn: apsw.Connection, node_id: int) -> int | None:
    """The kind of node ``node_id``; None when there is none."""
    rows = conn.execute("SELECT kind FROM vmp_nodes WHERE node_id = ?", (node_id,)).fetchall()
    return int(rows[0][0]) if rows else None  # type: ignore[arg-type]


def stored_metadata(conn: apsw.Connection, table: str, column: str, number: int) -> Any:
    """The metadata of the row of ``table`` whose ``column`` is ``number``; None when unset
    or absent."""
    rows = conn.execute(f"SELECT metadata FROM {table} WHERE {column} = ?", (number,)).fetchall()
    if not rows or rows[0][0] is None:
        return None
    return codec.loads(str(rows[0][0]))


def vector_rows(conn: apsw.Connection, start: int, stop: int, dim: int) -> Int32Matrix:
    """The vectors of records ``start … stop-1``, one row each."""
    rows = conn.execute(
        "SELECT vector FROM vmp_records WHERE record_id >= ? AND record_id < ? ORDER BY record_id",
        (start, stop),
    ).fetchall()
    blob = b"".join(bytes(row[0]) for row in rows)  # type: ignore[arg-type]
    return np.frombuffer(blob, dtype="<i4").astype(np.int32).reshape(-1, dim)


def read_state(conn: apsw.Connection, dim: int) -> VmpState:
    """The whole logical state, in canonical order (what a snapshot and the hash encode)."""
    next_record, next_node, _, _ = counters(conn)
    records = [
        RecordRow(int(rid), bytes(vec), tags, meta)
        for rid, vec, tags, meta in conn.execute(
            "SELECT record_id, vector, tags, metadata FROM vmp_records ORDER BY record_id"
        )
    ]
    nodes = [
        NodeRow(int(nid), int(kind), None if rid is None else int(rid), meta)
        for nid, kind, rid, meta in conn.execute(
            "SELECT node_id, kind, record_id, metadata FROM vmp_nodes ORDER BY node_id"
        )
    ]
    edges = [
        EdgeRow(int(src), int(dst), int(kind))
        for src, dst, kind in conn.execute(
            "SELECT src, dst, kind FROM vmp_edges ORDER BY src, dst, kind"
        )
    ]
    return VmpState(dim, next_record, next_node, records, nodes, edges)
