"""SIGKILL the provider (``python -m ratatoskr.provider serve``, all three planes,
file-backed) at random moments under a mixed write load on every plane, restart it,
and check: every acknowledged write is there and verbatim, no batch is partial,
chunk rows and vec0 rows are one-to-one, an idempotent retry of the call that was
in flight answers ``replayed`` exactly when it had landed, and VMP's state replays
to byte-identical snapshot bytes and the same state hash.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ratatoskr.provider.testing import ServerProcess
from ratatoskr.vmp import open_vmp_store

from .support import (
    VMP_DIM,
    affect_client,
    base,
    check_files,
    launch,
    memory_client,
    provider_env,
    report,
    size,
    vmp_client,
)
from .writers import BatchWriter, VmpWriter, settle_vmp


def _load_then_kill(
    server: ServerProcess,
    batches: list[BatchWriter],
    vmps: list[VmpWriter],
    rng: random.Random,
    *,
    max_delay_s: float,
) -> int:
    """Run every writer against ``server``; once each has an acknowledgement this
    round, wait a random moment and SIGKILL the provider. Returns the acks of the round."""
    writers: list[BatchWriter | VmpWriter] = [*batches, *vmps]
    start = {id(w): w.acks for w in writers}
    stop = threading.Event()
    threads: list[threading.Thread] = []
    clients: list[Any] = []
    for bw in batches:
        make = memory_client if bw.plane == "memory" else affect_client
        client = make(base(server, bw.plane), scope={"tenant": bw.tenant}, actor=bw.name)
        clients.append(client)
        threads.append(threading.Thread(target=bw.run, args=(client, stop), daemon=True))
    for vw in vmps:
        vclient = vmp_client(base(server, "vmp"))
        clients.append(vclient)
        threads.append(threading.Thread(target=vw.run, args=(vclient, stop), daemon=True))
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
        w.acks == start[id(w)] and w.error is None for w in writers
    ):
        time.sleep(0.005)
    time.sleep(rng.uniform(0, max_delay_s))
    server.stop(signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(60)
    for c in clients:
        c.close()
    for w in writers:
        assert w.error is None, f"{type(w.error).__name__}: {w.error}"
    return sum(w.acks - start[id(w)] for w in writers)


def _settle(
    server: ServerProcess, batches: list[BatchWriter], vmps: list[VmpWriter], replay: Any
) -> Counter[str]:
    seen: Counter[str] = Counter()
    for bw in batches:
        make = memory_client if bw.plane == "memory" else affect_client
        with make(base(server, bw.plane), scope={"tenant": bw.tenant}, actor=bw.name) as client:
            seen.update(bw.settle(client))
    with vmp_client(base(server, "vmp")) as vclient:
        seen.update(settle_vmp(vclient, vmps, replay))
    return seen


def kill_rounds(root: Path, rounds: int, *, seed: int, max_delay_s: float = 0.3) -> dict[str, Any]:
    env = provider_env(root)
    rng = random.Random(seed)
    batches = [
        BatchWriter("memory", "mem-a", "tenant-a"),
        BatchWriter("memory", "mem-b", "tenant-b"),
        BatchWriter("affect", "aff-a", "tenant-a"),
        BatchWriter("affect", "aff-b", "tenant-b"),
    ]
    vmps = [VmpWriter("vmp-a"), VmpWriter("vmp-b")]
    replay = open_vmp_store(":memory:", dim=VMP_DIM)
    totals: Counter[str] = Counter()
    started = time.monotonic()
    for round_no in range(rounds + 1):
        server = launch(root, env)
        try:
            if round_no:
                settled = _settle(server, batches, vmps, replay)
                totals["retried"] += settled["retried"]
                totals["replayed"] += settled["replayed"]
                totals["vmp_inflight_landed"] += settled["inflight_landed"]
            if round_no == rounds:
                break
            totals["acked"] += _load_then_kill(server, batches, vmps, rng, max_delay_s=max_delay_s)
            totals["kills"] += 1
        finally:
            if server.proc.poll() is None:
                server.stop()
        # The state a crash left, before anything reopened it.
        check_files(env)
    counts = check_files(env)
    replay.close()
    landed_batches = sum(len(w.landed) for w in batches)
    return {
        **totals,
        "landed_batches": landed_batches,
        "vmp_records": counts["vmp"],
        "memory_chunks": counts["memory"],
        "affect_keys": counts["affect"],
        "lost": 0,
        "seconds": round(time.monotonic() - started, 1),
    }


@pytest.mark.slow
def test_sigkill_rounds_lose_nothing_acknowledged(tmp_path: Path) -> None:
    rounds = size("kill_rounds", 5, 50, soaking=False)
    figures = kill_rounds(tmp_path, rounds, seed=20261130)
    report("kill-quick", figures)
    assert figures["kills"] == rounds


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_sigkill_rounds_soak(tmp_path: Path) -> None:
    rounds = size("kill_rounds", 5, 50, soaking=True)
    figures = kill_rounds(tmp_path, rounds, seed=8)
    report("kill-soak", figures)
    assert figures["kills"] == rounds
