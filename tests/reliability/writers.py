"""Writers for the SIGKILL rounds: each keeps a ledger of what it sent and what was
acknowledged, so that after a restart it can say what must be there, what may be
there (the one call in flight when the provider died), and what must not.

A writer runs in its own thread against a live provider until it is told to stop
or the provider vanishes under it (a transport error: the call in flight may or
may not have landed). ``settle`` then runs against the restarted provider: it
resolves the call in flight (an idempotent retry must answer ``replayed`` exactly
when the first attempt had landed) and checks every acknowledged write.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

from bifrost.client import BifrostClient
from ratatoskr.vmp import Unavailable, VmpStore
from ratatoskr.vmp.client import VmpClient
from ratatoskr.vmp.snapshot_reader import decode_snapshot

from .support import MEMORY_DIM, VMP_DIM

ITEMS = 6  # new ids per batch (the worker's shared record comes on top)


def _chunks(items: list[str], size: int = 500) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


@dataclass
class Inflight:
    kind: str  # "write" or "delete"
    n: int


@dataclass
class BatchWriter:
    """Memory ``upsert_many`` or affect ``put_many`` batches, each followed by the delete
    of one item of the batch before it (so deletes are interrupted too)."""

    plane: str
    name: str
    tenant: str
    landed: list[int] = field(default_factory=list)
    deleted: set[int] = field(default_factory=set)
    inflight: Inflight | None = None
    next_n: int = 0
    acks: int = 0
    error: BaseException | None = None

    # -- what a batch is -------------------------------------------------------------

    @property
    def shared(self) -> str:
        return f"{self.name}-shared"

    def ids(self, n: int) -> list[str]:
        return [f"{self.name}-{n}-{i}" for i in range(ITEMS)]

    def record(self, ident: str, n: int, i: int) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "scope": {"tenant": self.tenant, "end_user": f"u{i % 3}"},
            "batch": n,
            "note": f"{self.plane} {self.name} batch {n} item {i}",
        }
        if self.plane == "memory":
            rec["id"] = ident
            rec["embedding"] = [float((n * 7 + i * 3 + d) % 13) + 0.5 for d in range(MEMORY_DIM)]
        else:
            rec["key"] = ident
            rec["valence"] = (n % 11) / 10
        return rec

    def batch(self, n: int) -> list[dict[str, Any]]:
        items = [self.record(ident, n, i) for i, ident in enumerate(self.ids(n))]
        return [*items, self.record(self.shared, n, ITEMS)]

    def key(self, n: int) -> str:
        return f"{self.name}-batch-{n}"

    # -- calls -----------------------------------------------------------------------

    def _write(self, client: BifrostClient, n: int) -> Any:
        if self.plane == "memory":
            return client.upsert_many(self.batch(n), idempotency_key=self.key(n))
        return client.put_many(self.batch(n), idempotency_key=self.key(n))

    def _written(self, result: Any, *, replayed: bool) -> None:
        count = "upserted" if self.plane == "memory" else "written"
        assert result == {count: ITEMS + 1, "replayed": replayed}, result

    def run(self, client: BifrostClient, stop: threading.Event) -> None:
        """Write until ``stop`` or the provider vanishes; any other failure is kept."""
        try:
            while not stop.is_set():
                n = self.next_n
                self.inflight = Inflight("write", n)
                self._written(self._write(client, n), replayed=False)
                self.landed.append(n)
                self.next_n = n + 1
                self.acks += 1
                previous = n - 1
                if previous in self.landed and previous not in self.deleted:
                    self.inflight = Inflight("delete", previous)
                    assert client.delete_many([self.ids(previous)[0]]) == {"deleted": 1}
                    self.deleted.add(previous)
                self.inflight = None
        except httpx.TransportError:
            pass  # killed under us: ``inflight`` may or may not have landed
        except BaseException as exc:
            self.error = exc

    def settle(self, client: BifrostClient) -> dict[str, int]:
        """After a restart: resolve the call in flight, then check everything acknowledged."""
        retried = replayed = 0
        op, self.inflight = self.inflight, None
        if op is not None and op.kind == "write":
            found = client.get_many(self.ids(op.n))
            assert len(found) in (0, ITEMS), f"partial batch {self.name}-{op.n}: {len(found)}"
            landed = len(found) == ITEMS
            self._written(self._write(client, op.n), replayed=landed)
            retried, replayed = 1, int(landed)
            self.landed.append(op.n)
            self.next_n = op.n + 1
        elif op is not None:
            gone = self.ids(op.n)[0]
            before = client.get(gone)
            assert client.delete_many([gone]) == {"deleted": 0 if before is None else 1}
            self.deleted.add(op.n)
        self.verify(client)
        return {"retried": retried, "replayed": replayed}

    def verify(self, client: BifrostClient) -> None:
        """Every landed batch whole and verbatim, every acknowledged delete gone, and the
        shared record at one revision per landed batch."""
        expected: dict[str, dict[str, Any]] = {}
        for n in self.landed:
            for i, ident in enumerate(self.ids(n)):
                if not (i == 0 and n in self.deleted):
                    expected[ident] = self.record(ident, n, i)
        wanted = [self.ids(n)[0] for n in self.deleted] + list(expected)
        found: dict[str, dict[str, Any]] = {}
        for part in _chunks(wanted):
            for rec in client.get_many(part):
                found[rec["id" if self.plane == "memory" else "key"]] = rec
        assert set(found) == set(expected), (
            f"{self.name}: lost {sorted(set(expected) - set(found))[:5]},"
            f" resurrected {sorted(set(found) - set(expected))[:5]}"
        )
        for ident, rec in expected.items():
            got = dict(found[ident])
            assert got.pop("revision") == 1
            got.pop("recorded_at", None)
            assert got == rec, f"{ident} changed"
        shared = client.get(self.shared)
        if not self.landed:
            assert shared is None
            return
        assert shared["revision"] == len(self.landed), (self.name, shared["revision"])
        assert shared["batch"] == self.landed[-1]
        if self.plane == "affect":
            batches: list[int] = []
            before: int | None = None
            while True:
                args: dict[str, Any] = {"limit": 500}
                if before is not None:
                    args["before_revision"] = before
                page = client.history(self.shared, **args)
                batches += [item["batch"] for item in page["items"]]
                before = page["next_before_revision"]
                if before is None:
                    break
            assert batches == self.landed[::-1], f"{self.name}: history disagrees"


@dataclass
class VmpWriter:
    """VMP upserts (no idempotency on that wire): every third one attaches to the
    document of an earlier acknowledged upsert."""

    name: str
    sent: dict[int, dict[str, Any]] = field(default_factory=dict)
    acked: dict[int, int] = field(default_factory=dict)
    inflight: int | None = None
    next_n: int = 0
    acks: int = 0
    last_doc: int | None = None
    error: BaseException | None = None

    def payload(self, n: int) -> dict[str, Any]:
        attach = self.last_doc if n % 3 == 2 else None
        return {
            "vector": [float(((n * 5 + d * 3) % 17) - 8) + 0.25 * d for d in range(VMP_DIM)],
            "attach_to_document_node": attach,
            "tags": [self.name, f"n{n % 4}"],
            "metadata": {"w": self.name, "n": n},
        }

    def run(self, client: VmpClient, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                n = self.next_n
                body = self.payload(n)
                self.sent[n] = body
                self.inflight = n
                result = client.upsert_vector(
                    body["vector"],
                    attach_to_document_node=body["attach_to_document_node"],
                    tags=body["tags"],
                    metadata=body["metadata"],
                )
                self.acked[n] = result["record_id"]
                if body["attach_to_document_node"] is None:
                    self.last_doc = result["document_node_id"]
                self.inflight = None
                self.next_n = n + 1
                self.acks += 1
        except Unavailable:
            self.next_n = self.next_n + 1  # the call in flight is resolved by ``settle_vmp``
        except BaseException as exc:
            self.error = exc


def settle_vmp(client: VmpClient, writers: list[VmpWriter], replay: VmpStore) -> dict[str, int]:
    """After a restart: the records past ``replay``'s are exactly the acknowledged upserts
    plus at most the one in flight per writer, each whole; replaying them in record order
    into ``replay`` gives byte-identical snapshot bytes and the same state hash."""
    by_name = {w.name: w for w in writers}
    blob = client.snapshot()
    state = decode_snapshot(blob, dim=VMP_DIM)
    start = replay.record_count()
    landed_inflight = 0
    for row in state.records[start:]:
        assert row.metadata is not None
        meta = json.loads(row.metadata)
        writer = by_name[meta["w"]]
        n = meta["n"]
        body = writer.sent[n]
        if n in writer.acked:
            assert writer.acked[n] == row.record_id
        else:
            assert n == writer.inflight, f"record {row.record_id} was never acknowledged"
            writer.acked[n] = row.record_id
            landed_inflight += 1
        result = replay.upsert_vector(
            body["vector"],
            attach_to_document_node=body["attach_to_document_node"],
            tags=body["tags"],
            metadata=body["metadata"],
        )
        assert result.record_id == row.record_id
    for writer in writers:
        writer.inflight = None
        placed = {n for n, rid in writer.acked.items() if rid < len(state.records)}
        assert placed == set(writer.acked), f"{writer.name}: acknowledged upserts lost"
    assert replay.snapshot() == blob
    assert replay.state_hash() == client.state_hash()
    return {"records": len(state.records), "inflight_landed": landed_inflight}
