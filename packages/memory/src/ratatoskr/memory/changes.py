"""The change log another process's in-memory index catches up from.

Every write that changes chunks advances the change counter (``memory_counters``
``seq``) by one and stamps the rows it wrote with it; a delete leaves a tombstone
``(chunk_id, seq)``. An index built to ``seq = s`` catches up by applying the rows
and tombstones stamped after ``s``.

Tombstones are pruned by the writes themselves, below a **retention horizon**:
each write drops at most ``PRUNE_PER_WRITE`` plus as many as it adds of the
tombstones older than the last ``retention`` counter values (oldest first, a range
read of the ``seq`` index), and records in ``memory_counters`` that the log is
complete only after ``tombstones_pruned_through`` (every tombstone stamped later
is kept). An index older than that horizon cannot tell which of its rows were
deleted, so it reloads from the database instead of catching up: correctness
over speed, for a process that fell that far behind.

A tombstone keeps no id in the clear (an erased record leaves no byte of its id
in the file): it holds a keyed BLAKE2b digest of the id, with a random key made
once per file (migration 4, ``ratatoskr_meta`` ``tombstone_key``). A process
catching up maps digests back to the ids its index holds (:class:`Digests`).
The key lives in the same file, so it hides nothing from whoever holds the file
and guesses an id: it only makes a digest useless outside that file (no table
of precomputed digests works on two deployments). Chunk ids are unguessable
(the spec), which is what keeps a digest from being reversed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import apsw

from ratatoskr.sqlite import StorageInconsistent

# Tombstones are kept for the last this many change-counter values (writes that
# changed chunks). A process whose index is further behind reloads it (~2 s at 100k
# chunks × 384); one that is closer catches up from the tombstones.
DEFAULT_TOMBSTONE_RETENTION = 10_000
# Old tombstones a write may drop beyond the ones it adds: a delete of n ids drops up
# to 64 + n, so the backlog of an upgraded file drains and the table never outgrows
# the retention window, and no write pays for the whole backlog at once.
PRUNE_PER_WRITE = 64

SEQ = "seq"
KEY = "tombstone_key"
_DIGEST_BYTES = 16
HORIZON = "tombstones_pruned_through"
# The change counter as a scalar subquery (NULL before the first write: read as 0),
# for a statement that reads it in the same snapshot as the rows it returns.
SEQ_SQL = f"(SELECT value FROM memory_counters WHERE name = '{SEQ}')"


# Migration 5: tombstones keyed by the digest of the id. The old table's ids go
# (zeroed, secure_delete); the horizon moves to the current ``seq``, so an index older
# than this reloads instead of catching up from tombstones it could not read.
DIGEST_TOMBSTONES_SQL = f"""
DROP TABLE memory_tombstones;
CREATE TABLE memory_tombstones (
    digest BLOB PRIMARY KEY,
    seq INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX memory_tombstones_seq ON memory_tombstones(seq);
UPDATE memory_counters SET value = (SELECT value FROM memory_counters WHERE name = '{SEQ}')
    WHERE name = '{HORIZON}';
INSERT OR IGNORE INTO ratatoskr_meta (key, value) VALUES ('{KEY}', lower(hex(randomblob(32))));
"""


def _counter(conn: apsw.Connection, name: str) -> int:
    rows = conn.execute("SELECT value FROM memory_counters WHERE name = ?", (name,)).fetchall()
    return int(rows[0][0]) if rows else 0  # type: ignore[arg-type]


def seq(conn: apsw.Connection) -> int:
    """The change counter in ``conn``'s snapshot."""
    return _counter(conn, SEQ)


def set_seq(conn: apsw.Connection, value: int) -> None:
    conn.execute("UPDATE memory_counters SET value = ? WHERE name = ?", (value, SEQ))


def horizon(conn: apsw.Connection) -> int:
    """The newest change-counter value whose tombstones may have been pruned (0: none
    ever were); every tombstone stamped after it is still there."""
    return _counter(conn, HORIZON)


def key(conn: apsw.Connection) -> bytes:
    """The file's tombstone key. Raises StorageInconsistent for a file without one (its
    migration 4 did not run, which an open prevents)."""
    rows = conn.execute("SELECT value FROM ratatoskr_meta WHERE key = ?", (KEY,)).fetchall()
    if not rows:
        raise StorageInconsistent("the memory file has no tombstone key; run `ratatoskr doctor`")
    return bytes.fromhex(str(rows[0][0]))


def digest(secret: bytes, chunk_id: str) -> bytes:
    """The tombstone of ``chunk_id``: its keyed BLAKE2b-128 digest."""
    return hashlib.blake2b(chunk_id.encode("utf-8"), key=secret, digest_size=_DIGEST_BYTES).digest()


def bury(conn: apsw.Connection, ids: Sequence[str], at: int) -> None:
    """Tombstones for ``ids`` deleted by the write stamped ``at``."""
    secret = key(conn)
    conn.executemany(
        "INSERT OR REPLACE INTO memory_tombstones (digest, seq) VALUES (?, ?)",
        [(digest(secret, chunk_id), at) for chunk_id in ids],
    )


def unbury(conn: apsw.Connection, ids: Sequence[str]) -> None:
    """Drop the tombstones of ``ids`` written again (their rows carry the newer stamp)."""
    secret = key(conn)
    conn.executemany(
        "DELETE FROM memory_tombstones WHERE digest = ?", [(digest(secret, i),) for i in ids]
    )


def buried_since(conn: apsw.Connection, since: int) -> list[bytes]:
    """The digests of the ids deleted by writes stamped after ``since``."""
    return [
        bytes(row[0])
        for row in conn.execute("SELECT digest FROM memory_tombstones WHERE seq > ?", (since,))
    ]


class Digests:
    """Tombstone digests back to the ids of an index: built from the ids it holds
    when a digest is first not found, kept up to date with the ids it learns since
    (ids it no longer holds may stay: removing an absent id does nothing)."""

    def __init__(self) -> None:
        self._secret: bytes | None = None
        self._ids: dict[bytes, str] = {}
        self._complete = False

    def resolve(
        self, conn: apsw.Connection, digests: Sequence[bytes], held: Iterable[str]
    ) -> list[str]:
        """The ids of ``held`` whose digests are among ``digests``."""
        if not digests:
            return []
        secret = key(conn)
        if secret != self._secret:
            self._secret, self._ids, self._complete = secret, {}, False
        if not self._complete and any(d not in self._ids for d in digests):
            self._ids = {digest(secret, i): i for i in held}
            self._complete = True
        return [self._ids[d] for d in digests if d in self._ids]

    def learn(self, ids: Iterable[str]) -> None:
        """Ids the index now holds (so a later delete of them resolves without a rebuild)."""
        if self._complete and self._secret is not None:
            for i in ids:
                self._ids[digest(self._secret, i)] = i

    def forget_all(self) -> None:
        """The index was rebuilt: the next miss maps every id again."""
        self._complete = False


def prune(conn: apsw.Connection, *, at: int, retention: int, limit: int) -> int:
    """Drop up to ``limit`` tombstones stamped ``at - retention`` or earlier, oldest
    first, and move the horizon up to the newest one dropped. Returns how many went."""
    floor = at - retention
    if floor < 1 or limit < 1:
        return 0
    dropped = conn.execute(
        "DELETE FROM memory_tombstones WHERE digest IN ("
        " SELECT digest FROM memory_tombstones WHERE seq <= ? ORDER BY seq LIMIT ?)"
        " RETURNING seq",
        (floor, limit),
    ).fetchall()
    if not dropped:
        return 0
    newest = max(int(row[0]) for row in dropped)  # type: ignore[arg-type]
    conn.execute(
        "UPDATE memory_counters SET value = max(value, ?) WHERE name = ?", (newest, HORIZON)
    )
    return len(dropped)
