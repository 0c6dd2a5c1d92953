"""The two routes of a search: from memory, proven by the probe, or through a read
transaction.

Most searches answer from the rows and metadata flags held in memory. The probe —
a read-only connection of the store's own, in autocommit, so one statement reads
one snapshot — proves them the file's with one statement of the counters
(``next_record_id``, ``epoch``, ``metadata_changes``): records are append-only
within an epoch and a trigger bumps ``metadata_changes`` on every metadata
update, whoever writes. Hits with metadata are read in a second statement that
reads the counters again, and stand only if they are unchanged. Otherwise the
general route loads what is missing inside one read transaction, then reads the
hits' metadata there.
"""

from __future__ import annotations

from typing import Any

import apsw

from ratatoskr.vmp.index import ExactIndex, Int64Array
from ratatoskr.vmp.queries import hits_metadata, probe_state
from ratatoskr.vmp.results import SearchHit, search_hits
from ratatoskr.vmp.sync import sync_held
from ratatoskr.vmp.tagged import MetadataFlags


def held_metadata(
    probe: apsw.Connection,
    flags: MetadataFlags,
    epoch: int,
    count: int,
    top: list[tuple[int, int]],
) -> dict[int, Any] | None:
    """The metadata of the ``top`` hits, scored over the ``count`` rows of ``epoch`` held,
    when the probe proves those rows and ``flags`` the file's; None otherwise."""
    state = probe_state(probe)
    if state[:2] != (count, epoch):
        return None
    held = flags.current(epoch, state[2], count)
    if held is None:
        return None
    tagged = [hit for hit in top if held[hit[0]]]
    if not tagged:
        return {}
    again, metadata = hits_metadata(probe, tagged)
    return metadata if again == state else None


def general_search(
    conn: apsw.Connection, index: ExactIndex, flags: MetadataFlags, fixed: Int64Array, k: int
) -> list[SearchHit]:
    """Inside a read transaction: the held state brought to the file's, then the top
    ``k`` and their metadata."""
    top = sync_held(conn, index, flags).top_k(fixed, k)
    _, metadata = hits_metadata(conn, top)
    return search_hits(top, metadata)
