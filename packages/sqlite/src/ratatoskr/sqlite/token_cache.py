"""The token cache of a plane, in a small SQLite file beside the plane's database.

A Heimdall token is good once for the whole deployment: every process that
serves a plane's database file — the workers of one server, the combined
provider and a standalone plane, the same provider after a restart — must
refuse a ``jti`` that any of them accepted. Keeping the remembered ``jti``
values in a file *derived from the plane's file* (:func:`token_cache_path`) makes
that automatic: whoever serves the file shares the cache, and no setting can
point two processes of one deployment at different caches.

Why its own file and not a table in the plane's database: every call writes
here, and the plane's writer lock and fsync-per-commit (``synchronous=FULL``)
are for acknowledged data. This file is written with ``synchronous=NORMAL`` in
WAL mode: a commit reaches the operating system before the call goes on, so a
process crash (SIGKILL) never forgets an accepted ``jti``; a power cut can
forget the last moments of them (a replay after a power cut needs a token
still inside its lifetime — 300 s at most — when the machine is back).

Entries expire at ``exp + leeway`` of their token. Neither pruning nor checkpoints
run inside a call: a call's write is its one ``INSERT`` (a prune statement in every
call was a third of its CPU, and a commit that crossed SQLite's automatic checkpoint
threshold copied the WAL back and fsynced it: docs/decisions.md). A daemon thread,
every :data:`CHECKPOINT_EVERY_S`, drops the entries that expired by the newest time
a call of this process gave (the callers' clock, never another), in transactions of
at most :data:`PRUNE_BATCH` rows so that a call never waits long behind one, then
checkpoints the WAL (PASSIVE, so it never blocks a writer), which keeps the WAL and
the table small and the calls at their p50.
"""

from __future__ import annotations

import os
import threading

from ratatoskr.sqlite.database import Database
from ratatoskr.sqlite.driver import MEMORY_PATH, ConnectionOptions
from ratatoskr.sqlite.errors import StorageError
from ratatoskr.sqlite.migrations import Migration

__all__ = ["JTI_CACHE_PLANE", "PRUNE_BATCH", "SqliteTokenCache", "token_cache_path"]

# On disk the cache keeps its first name ("replay" meant the token cache then): the file
# <db>.replay, plane "replay" in its version table, table replay_jti. Renaming them would
# orphan every deployed cache (a provider would open an empty one beside the old and accept
# again a token already used) and break operators' scripts and backups excluding the file.
JTI_CACHE_PLANE = "replay"
CHECKPOINT_EVERY_S = 1.0
JTI_CACHE_SUFFIX = ".replay"
PRUNE_BATCH = 512
_MIGRATIONS = [
    Migration(
        1,
        "remembered jti values",
        """
        CREATE TABLE replay_jti (
            jti TEXT PRIMARY KEY,
            expires_at REAL NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX replay_jti_expiry ON replay_jti(expires_at);
        """,
    )
]


def token_cache_path(db_path: str) -> str:
    """The token cache file of the plane database at ``db_path`` (beside it; the real
    path, so a symlink and its target share one cache)."""
    if db_path == MEMORY_PATH:
        raise ValueError("an in-memory database has no replay file")
    return os.path.realpath(db_path) + JTI_CACHE_SUFFIX


class SqliteTokenCache:
    """bifrost's ``TokenCache`` over one SQLite file, shared by every process that opens it.

    Raises the StorageError types (from ``ratatoskr.sqlite``) when the file cannot
    be used; the verifier's caller renders them as 500s, never as an acceptance.
    """

    def __init__(self, path: str, *, busy_timeout_ms: int = 5_000) -> None:
        self.path = path
        self._db = Database(
            path,
            plane=JTI_CACHE_PLANE,
            migrations=_MIGRATIONS,
            options=ConnectionOptions(
                busy_timeout_ms=busy_timeout_ms, synchronous="NORMAL", wal_autocheckpoint=0
            ),
        )
        self._stop = threading.Event()
        # The ``now`` the latest call gave (not the largest ever given: after the clock
        # steps back, pruning by a time from before the step would drop entries that
        # are live on the clock the calls use now), and the one the last prune used.
        self._latest = float("-inf")
        self._pruned_at = float("-inf")
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name="ratatoskr-replay-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def _checkpoint_loop(self) -> None:
        while not self._stop.wait(CHECKPOINT_EVERY_S):
            try:
                self.prune()
                self._db.checkpoint()
            except StorageError:
                # The next call reports the same problem, typed; the cache stays usable
                # for reads, and a later round retries.
                continue

    def check_and_add(self, jti: str, expires_at: float, now: float) -> bool:
        self._latest = now
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO replay_jti (jti, expires_at) VALUES (?, ?)"
                " ON CONFLICT (jti) DO UPDATE SET expires_at = excluded.expires_at"
                " WHERE replay_jti.expires_at <= ?",
                (jti, expires_at, now),
            )
            return conn.changes() == 1

    def prune(self, now: float | None = None) -> int:
        """Drop the entries expired at ``now`` (None: the time the latest call of this
        process gave; nothing when it is the time the last prune used), at most
        :data:`PRUNE_BATCH` per write transaction; how many went. An expired entry
        already counts as forgotten, so this changes no answer: it keeps the table
        small (the checkpointer runs it)."""
        if now is None:
            now = self._latest
            if now == self._pruned_at:
                return 0
        gone = 0
        while True:
            with self._db.write() as conn:
                conn.execute(
                    "DELETE FROM replay_jti WHERE jti IN"
                    " (SELECT jti FROM replay_jti WHERE expires_at <= ? LIMIT ?)",
                    (now, PRUNE_BATCH),
                )
                deleted = conn.changes()
            gone += deleted
            if deleted < PRUNE_BATCH or self._stop.is_set():
                break
        self._pruned_at = now
        return gone

    def seen(self, jti: str, now: float) -> bool:
        rows = self._db.read_rows(
            "SELECT 1 FROM replay_jti WHERE jti = ? AND expires_at > ?", (jti, now)
        )
        return bool(rows)

    def __len__(self) -> int:
        """Entries held, expired ones not yet pruned included."""
        with self._db.read() as conn:
            return int(conn.execute("SELECT count(*) FROM replay_jti").fetchall()[0][0])  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the checkpointer and close the file; idempotent."""
        self._stop.set()
        if self._checkpointer.is_alive() and self._checkpointer is not threading.current_thread():
            self._checkpointer.join(timeout=5)
        self._db.close()
