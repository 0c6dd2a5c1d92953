"""Crash testing: run a writer process, let it acknowledge some work, SIGKILL it.

Durability is tested, not assumed. Every plane's crash test runs a child that
writes a stream of batches and prints ``ack <n>`` (flushed) after batch ``n``
was acknowledged by its store; :func:`kill_mid_stream` kills it at a random
moment after some acknowledgements and returns them, so the test can check
that each acknowledged batch survived and no batch is partial.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence


class FixedDelay(random.Random):
    """An ``rng`` for :func:`kill_mid_stream` whose "random" delay is always
    ``fraction`` of the range it asks for: kills spread over a whole operation (an
    upgrade, say) deterministically, one fraction per run."""

    def __init__(self, fraction: float) -> None:
        super().__init__(0)
        self.fraction = fraction

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.fraction


def kill_mid_stream(
    argv: Sequence[str],
    *,
    min_acks: int,
    rng: random.Random,
    max_delay_s: float = 0.05,
    timeout_s: float = 60,
) -> list[int]:
    """Run ``python argv…``, wait for ``min_acks`` acknowledgements, sleep a random
    moment (to land inside a batch), SIGKILL it; return the acknowledged batch numbers.

    The child sees this process's ``sys.path`` as ``PYTHONPATH``. Raises
    AssertionError when the child made no progress before ``timeout_s``.
    """
    proc = subprocess.Popen(  # noqa: S603 - argv comes from the calling test
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    acks: list[int] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("ack "):
                acks.append(int(line.split()[1]))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while len(acks) < min_acks and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, max_delay_s))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    thread.join(5)
    if len(acks) < min_acks:
        raise AssertionError(f"writer acknowledged {len(acks)} batches, fewer than {min_acks}")
    return list(acks)
