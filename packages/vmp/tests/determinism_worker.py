"""Feed a fresh VMP store a seeded sequence of operations over HTTP; write what came back.

Run as a separate process by test_determinism.py:
``python determinism_worker.py SEED DB OPS OUT_JSON OUT_SNAPSHOT`` (DB may be ``:memory:``).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

import httpx

from ratatoskr.sqlite import ConnectionOptions
from ratatoskr.vmp import build_vmp_app, open_vmp_store

DIM = 16
KEY = "determinism-key"
SPECIAL = [-32768.0, 32767.99, 0.0, -0.0, 1e-9, -1e-9, 1 / 65536, -1 / 65536, -32768, 32767]


def random_vector(rng: random.Random, seen: list[list[Any]]) -> list[Any]:
    mode = rng.random()
    if seen and mode < 0.15:
        return rng.choice(seen)  # duplicates make ties, broken by record_id
    if mode < 0.25:
        return [rng.choice(SPECIAL) for _ in range(DIM)]
    if mode < 0.5:
        return [rng.uniform(-32768.0, 32767.99) for _ in range(DIM)]
    if mode < 0.6:
        return [rng.randint(-5, 5) for _ in range(DIM)]
    return [rng.uniform(-1.0, 1.0) for _ in range(DIM)]


def random_metadata(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.4:
        return None
    if roll < 0.6:
        return {
            "n": rng.randint(-(10**15), 10**15),
            "f": rng.uniform(-1e6, 1e6),
            "s": f"é{rng.random()}",
        }
    if roll < 0.8:
        return [rng.random(), None, True, "x"]
    return rng.choice(["text", 3.25, 0, {"nested": {"b": 1, "a": [1, {"z": None}]}}])


async def run(seed: int, db: str, ops: int) -> tuple[dict[str, Any], bytes]:
    store = open_vmp_store(db, dim=DIM, options=ConnectionOptions(synchronous="OFF"))
    app = build_vmp_app(store, api_key=KEY)
    rng = random.Random(seed)
    seen: list[list[Any]] = []
    documents: list[int] = []
    chunks: list[int] = []
    records = 0
    log: list[dict[str, Any]] = []
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://vmp", headers=headers
    ) as http:

        async def call(method: str, path: str, body: Any = None) -> Any:
            if method == "GET":
                response = await http.get(path, params=body)
            else:
                response = await http.post(path, json=body)
            entry = {"method": method, "path": path, "request": body}
            entry.update(status=response.status_code, response=response.json())
            log.append(entry)
            return entry

        for _ in range(ops):
            roll = rng.random()
            if roll < 0.40 or (roll < 0.60 and not documents):
                vector = random_vector(rng, seen)
                body = {
                    "vector": vector,
                    "tags": rng.choice([None, [], ["a", "b"]]),
                    "metadata": random_metadata(rng),
                }
                entry = await call(
                    "POST", rng.choice(["/v1/memory/upsert_vector", "/v1/memory/upsert"]), body
                )
                seen.append(vector)
                documents.append(entry["response"]["document_node_id"])
                chunks.append(entry["response"]["chunk_node_id"])
                records += 1
            elif roll < 0.60:
                vector = random_vector(rng, seen)
                body = {"vector": vector, "attach_to_document_node": rng.choice(documents)}
                entry = await call("POST", "/v1/memory/upsert_vector", body)
                seen.append(vector)
                chunks.append(entry["response"]["chunk_node_id"])
                records += 1
            elif roll < 0.65:  # a chunk node or an unknown id: 404, nothing written
                target = (
                    rng.choice(chunks)
                    if chunks and rng.random() < 0.5
                    else 10**6 + rng.randint(0, 9)
                )
                await call(
                    "POST",
                    "/v1/memory/upsert_vector",
                    {"vector": random_vector(rng, seen), "attach_to_document_node": target},
                )
            elif roll < 0.75:
                kind = rng.choice(["rec", "node"])
                limit = records if kind == "rec" else len(documents) + len(chunks)
                number = rng.randint(0, limit + 2)  # sometimes unknown: 404
                await call(
                    "POST",
                    "/v1/memory/meta/set",
                    {"target_id": f"{kind}:{number}", "metadata": random_metadata(rng)},
                )
            elif roll < 0.78:
                number = rng.randint(0, records + 2)
                await call(
                    "GET",
                    "/v1/memory/meta/get",
                    {"target_id": f"{rng.choice(['rec', 'node'])}:{number}"},
                )
            elif roll < 0.92:
                k = rng.choice([1, 2, 5, 10, 30, 1000])
                path = rng.choice(["/v1/memory/search_vector", "/v1/memory/search"])
                await call("POST", path, {"query_vector": random_vector(rng, seen), "k": k})
            elif roll < 0.96:
                size = rng.choice([DIM - 1, DIM + 1])
                if rng.random() < 0.5:
                    await call("POST", "/v1/memory/upsert_vector", {"vector": [0.5] * size})
                else:
                    await call(
                        "POST", "/v1/memory/search_vector", {"query_vector": [0.5] * size, "k": 3}
                    )
            else:
                vector = random_vector(rng, seen)[:]
                vector[rng.randrange(DIM)] = rng.choice([32768.0, -32768.5, 1e12])
                await call("POST", "/v1/memory/upsert_vector", {"vector": vector})

        finals = [random_vector(rng, seen) for _ in range(8)]
        results = [
            (await call("POST", "/v1/memory/search", {"query_vector": q, "k": 10}))["response"]
            for q in finals
        ]
        digest = (await http.get("/v1/proof/state")).json()["final_state_hash"]
        blob = (await http.get("/v1/snapshot/download")).content
    store.close()
    return {"hash": digest, "log": log, "final_queries": finals, "final_results": results}, blob


def main() -> None:
    seed, db, ops, out_json, out_snapshot = sys.argv[1:6]
    report, blob = asyncio.run(run(int(seed), db, int(ops)))
    Path(out_json).write_text(json.dumps(report), encoding="utf-8")
    Path(out_snapshot).write_bytes(blob)


if __name__ == "__main__":
    main()
