"""Replacing a store's whole state by a snapshot, atomically, with bounded memory.

Three passes over a seekable binary file: the checksum, then every check without
keeping the rows, then — inside one write transaction that replaces every table —
the rows read again and refused (rolling back) unless they are the bytes the
second pass checked. On any error the current state is untouched.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from typing import IO

from ratatoskr.sqlite import Database
from ratatoskr.vmp.errors import CapacityExceeded, InternalError, InvalidArgument
from ratatoskr.vmp.snapshot_reader import SnapshotCounts, check_snapshot, open_snapshot
from ratatoskr.vmp.storage_errors import storage_errors

SnapshotSource = str | os.PathLike[str] | IO[bytes]


@contextlib.contextmanager
def snapshot_file(source: SnapshotSource) -> Iterator[IO[bytes]]:
    """The binary file of ``source``: a path opened (and closed after), or a seekable
    binary file as it is. Raises InvalidArgument for anything else or a path that
    cannot be opened."""
    if isinstance(source, str | os.PathLike):
        try:
            opened = open(source, "rb")  # noqa: SIM115 (closed below, errors mapped)
        except OSError as exc:
            raise InvalidArgument("snapshot file cannot be opened") from exc
        with opened:
            yield opened
        return
    if _is_text(source) or not source.seekable():
        raise InvalidArgument("a snapshot is read from a seekable binary file")
    yield source


def _is_text(file: object) -> bool:
    # A function of ``object``: mypy deems a text file an impossible ``IO[bytes]``.
    return isinstance(file, io.TextIOBase)


def replace_state(db: Database, file: IO[bytes], *, dim: int, max_records: int) -> None:
    """Replace every table of ``db`` by the snapshot in ``file`` (from its position to
    its end). Raises InvalidArgument (corrupt, truncated, foreign, other dim, changed
    between passes), CapacityExceeded (more than ``max_records``, a full disk),
    InternalError (the file could not be read)."""
    try:
        start = file.tell()
        counts = check_snapshot(file, dim=dim)
        _check_capacity(counts, max_records)
        file.seek(start)
        with storage_errors(), db.write() as conn:
            body = open_snapshot(file, dim=dim, verify_checksum=False, checked=counts.checksum)
            _check_capacity(body.counts, max_records)
            conn.execute("DELETE FROM vmp_edges; DELETE FROM vmp_nodes; DELETE FROM vmp_records;")
            conn.executemany(
                "INSERT INTO vmp_records (record_id, vector, tags, metadata) VALUES (?, ?, ?, ?)",
                body.records(),
            )
            conn.executemany(
                "INSERT INTO vmp_nodes (node_id, kind, record_id, metadata) VALUES (?, ?, ?, ?)",
                body.nodes(),
            )
            conn.executemany(
                "INSERT INTO vmp_edges (src, dst, kind) VALUES (?, ?, ?)", body.edges()
            )
            body.finish()
            conn.execute(
                "UPDATE vmp_state SET next_record_id = ?, next_node_id = ?, epoch = epoch + 1"
                " WHERE id = 0",
                (body.counts.next_record_id, body.counts.next_node_id),
            )
    except OSError as exc:
        raise InternalError(f"snapshot file could not be read ({type(exc).__name__})") from exc


def _check_capacity(counts: SnapshotCounts, max_records: int) -> None:
    if counts.records > max_records:
        raise CapacityExceeded(
            f"the snapshot holds more than this store's maximum of {max_records} records"
        )
