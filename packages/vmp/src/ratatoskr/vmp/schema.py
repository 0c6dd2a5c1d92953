"""The VMP plane's tables, as an append-only list of migrations.

``vmp_records``: one row per record; ``vector`` is the Q16.16 values as
little-endian int32 (``dim * 4`` bytes); ``tags`` / ``metadata`` canonical JSON
or NULL. ``vmp_nodes``: document (kind 0) and chunk (kind 1) nodes; a chunk
node names its record. ``vmp_edges``: one PARENT_OF edge (kind 1) from a
document to each of its chunks. ``vmp_state``: one row of counters — the next
record and node ids (logical state, snapshotted and hashed) and ``epoch``,
which is not state: it changes whenever a restore replaces the state, so
caches of the vectors know to reload; ``metadata_changes`` (migration 2) likewise
for what is cached of the records' metadata.
"""

from __future__ import annotations

from ratatoskr.sqlite import Migration

PLANE = "vmp"

NODE_DOCUMENT = 0
NODE_CHUNK = 1
EDGE_PARENT_OF = 1

_INITIAL = f"""
CREATE TABLE vmp_records (
    record_id INTEGER PRIMARY KEY CHECK (record_id >= 0),
    vector BLOB NOT NULL,
    tags TEXT,
    metadata TEXT
);
CREATE TABLE vmp_nodes (
    node_id INTEGER PRIMARY KEY CHECK (node_id >= 0),
    kind INTEGER NOT NULL CHECK (kind IN ({NODE_DOCUMENT}, {NODE_CHUNK})),
    record_id INTEGER UNIQUE,
    metadata TEXT,
    CHECK ((kind = {NODE_CHUNK}) = (record_id IS NOT NULL))
);
CREATE TABLE vmp_edges (
    src INTEGER NOT NULL,
    dst INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    PRIMARY KEY (src, dst, kind)
) WITHOUT ROWID;
CREATE TABLE vmp_state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    next_record_id INTEGER NOT NULL,
    next_node_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL
);
INSERT INTO vmp_state (id, next_record_id, next_node_id, epoch) VALUES (0, 0, 0, 0);
"""

# ``metadata_changes`` counts the updates of a record's metadata (not
# state either: never snapshotted or hashed); the trigger bumps it whoever writes, so
# a process that holds which records have metadata (``ratatoskr.vmp.tagged``) can tell
# from the counters alone whether that still holds; ``metadata_changed_record`` is the
# record of the last such update, so flags one update behind catch up by reading that
# one record. The partial index lists the
# records that have metadata, so reloading those flags after another process's update
# reads that short list, not every record's row (vectors included).
_METADATA_CHANGES = """
ALTER TABLE vmp_state ADD COLUMN metadata_changes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE vmp_state ADD COLUMN metadata_changed_record INTEGER;
CREATE TRIGGER vmp_records_metadata_changes AFTER UPDATE OF metadata ON vmp_records
BEGIN
    UPDATE vmp_state
    SET metadata_changes = metadata_changes + 1, metadata_changed_record = NEW.record_id
    WHERE id = 0;
END;
CREATE INDEX vmp_records_with_metadata ON vmp_records (record_id) WHERE metadata IS NOT NULL;
"""

MIGRATIONS = [
    Migration(1, "vmp records, nodes, edges and counters", _INITIAL),
    Migration(2, "vmp metadata change counter", _METADATA_CHANGES),
]
