"""bifrost.consumer.callpool: store calls off the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bifrost.consumer.callpool import POOL_THREADS, run_off_loop


def test_run_off_loop_result_error_and_cancel_before_start() -> None:
    ran: list[str] = []

    def boom() -> None:
        raise KeyError("k")

    async def scenario() -> None:
        assert await run_off_loop(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(KeyError):
            await run_off_loop(boom)
        # every pool thread busy, so the next call waits in the queue; cancelling its
        # caller means it never runs
        gate = threading.Event()
        busy = [asyncio.ensure_future(run_off_loop(gate.wait, 10)) for _ in range(POOL_THREADS)]
        await asyncio.sleep(0.2)
        queued = asyncio.ensure_future(run_off_loop(ran.append, "late"))
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        gate.set()
        await asyncio.gather(*busy)
        await asyncio.sleep(0.1)

    asyncio.run(scenario())
    assert ran == []
