"""bifrost's ``TokenCache`` in PostgreSQL: a token is good once for every provider process.

Each plane keeps its remembered ``jti`` values in its own schema (the table
``replay_jti``, plane ``replay`` in the version table), the counterpart of the
SQLite backend's replay file beside the plane's database: whoever serves a
plane's schema shares its cache, across processes and hosts, restarts and
reconnects.

``check_and_add`` is one transaction: prune up to :data:`PRUNE_BATCH` expired
rows (skipping rows another call holds), then
``INSERT … ON CONFLICT (jti) DO UPDATE … WHERE expired RETURNING 1``: a row comes
back only for a new or expired ``jti``. Two calls with one ``jti`` serialise on
its index entry, so exactly one of them is accepted.

It commits with ``synchronous_commit = off`` (the SQLite replay file's
``synchronous=NORMAL``, for the same reason): every call writes here, and the
commit need not wait for the WAL flush. A client that crashes never makes the
server forget an accepted ``jti``; a *server* crash can forget the last
fraction of a second of them (``wal_writer_delay``, 200 ms by default, times
three at worst) — a replay then needs a stolen token still inside its lifetime
(300 s at most) when the server is back. ``seen`` is a plain read: MVCC never
makes it wait on a writer.
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor, sql

from ratatoskr.postgres.database import Pool, PoolOptions, PostgresDatabase, on_table, open_schema
from ratatoskr.postgres.migrations import Migration
from ratatoskr.postgres.text import to_db, utf8_encodable

__all__ = ["JTI_CACHE_PLANE", "PRUNE_BATCH", "PostgresTokenCache"]

# The plane and table keep their first name ("replay" meant the token cache then): a
# rename would orphan every deployed schema's cache (see ratatoskr.sqlite.token_cache).
JTI_CACHE_PLANE = "replay"
PRUNE_BATCH = 64
_TABLE = "replay_jti"


def _jti_key(jti: str) -> str:
    """The stored form of a ``jti`` (any string of 1..256 characters): escaped as ids
    are, and a lone surrogate (which UTF-8 cannot carry) as the hex of its
    surrogate-pass bytes behind a prefix the escape never produces."""
    if utf8_encodable(jti):
        return to_db(jti)
    return "\x01\x03" + jti.encode("utf-8", "surrogatepass").hex()


class PostgresTokenCache:
    """The ``jti`` token cache of the plane schema ``schema`` (see the module docstring).

    ``dsn`` is a libpq URI / key=value string (the cache opens and owns a small
    pool) or an open pool to share with the plane's store. Raises ValueError for a
    bad schema name, StorageUnavailable when the server cannot be reached; the
    methods raise StorageError subclasses, which a verifier's caller renders as
    a 500, never as an acceptance.
    """

    def __init__(
        self,
        dsn: str | Pool,
        *,
        schema: str,
        pool_options: PoolOptions | None = None,
    ) -> None:
        table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(_TABLE))
        v1 = sql.SQL(
            'CREATE TABLE {t} (jti text COLLATE "C" PRIMARY KEY,'
            " expires_at double precision NOT NULL);"
            " CREATE INDEX {i} ON {t} (expires_at)"
        ).format(t=table, i=sql.Identifier(f"{_TABLE}_expiry"))
        self._db: PostgresDatabase = open_schema(
            dsn,
            lambda db: db,
            schema=schema,
            plane=JTI_CACHE_PLANE,
            migrations=[Migration(1, "remembered jti values", v1)],
            pool_options=pool_options or PoolOptions(max_size=4),
        )
        self.schema = schema
        self._check_sql = on_table(
            table,
            "INSERT INTO {t} AS r (jti, expires_at) VALUES (%s, %s)"
            " ON CONFLICT (jti) DO UPDATE SET expires_at = EXCLUDED.expires_at"
            " WHERE r.expires_at <= %s RETURNING 1",
        )
        self._prune_sql = on_table(
            table,
            "DELETE FROM {t} WHERE jti IN (SELECT jti FROM {t} WHERE expires_at <= %s"
            " LIMIT %s FOR UPDATE SKIP LOCKED)",
        )
        self._seen_sql = on_table(table, "SELECT 1 FROM {t} WHERE jti = %s AND expires_at > %s")
        self._count_sql = on_table(table, "SELECT count(*) FROM {t}")

    def check_and_add(self, jti: str, expires_at: float, now: float) -> bool:
        key = _jti_key(jti)

        def add(cur: Cursor[Any]) -> bool:
            cur.execute(b"SET LOCAL synchronous_commit = off")
            cur.execute(self._prune_sql, (now, PRUNE_BATCH))
            cur.execute(self._check_sql, (key, expires_at, now))
            return cur.fetchone() is not None

        # Unbounded (no write slot, lock or commit bound): it never waits for the
        # standby (synchronous_commit off), and every call, a read too, comes here first.
        return self._db.run(add, mode="write", bound="none")

    def seen(self, jti: str, now: float) -> bool:
        key = _jti_key(jti)
        return (
            self._db.run(lambda cur: cur.execute(self._seen_sql, (key, now)).fetchone()) is not None
        )

    def __len__(self) -> int:
        """Entries held, expired ones not yet pruned included."""
        row = self._db.run(lambda cur: cur.execute(self._count_sql).fetchone())
        return 0 if row is None else int(row[0])

    def close(self) -> None:
        """Close the pool if the cache opened it; idempotent."""
        self._db.close()
