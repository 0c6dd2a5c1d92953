"""The readers-writer lock around the in-process index: readers share it, a writer
has it alone, and a waiting writer goes before readers that arrive after it."""

from __future__ import annotations

import threading
import time

import pytest

from ratatoskr.memory.rwlock import ReadWriteLock

WAIT = 5.0  # seconds any step may take before the test gives up (never reached when green)


def test_readers_share_the_lock() -> None:
    lock = ReadWriteLock()
    inside = threading.Barrier(3, timeout=WAIT)

    def reader() -> None:
        with lock.read():
            inside.wait()  # all three readers are inside at once, or this times out

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    with lock.read():
        inside.wait()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads)


def test_a_writer_excludes_readers_and_writers() -> None:
    lock = ReadWriteLock()
    events: list[str] = []
    started = threading.Event()

    def reader() -> None:
        started.set()
        with lock.read():
            events.append("read")

    def writer() -> None:
        with lock.write():
            events.append("write 2")

    with lock.write():
        threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
        for t in threads:
            t.start()
        assert started.wait(WAIT)
        time.sleep(0.05)  # both are waiting for the lock now
        events.append("write 1 done")
    for t in threads:
        t.join(WAIT)
    assert events[0] == "write 1 done"
    assert sorted(events[1:]) == ["read", "write 2"]


def test_a_waiting_writer_goes_before_later_readers() -> None:
    lock = ReadWriteLock()
    events: list[str] = []
    writer_waiting = threading.Event()

    def writer() -> None:
        writer_waiting.set()
        with lock.write():
            events.append("write")

    def late_reader() -> None:
        with lock.read():
            events.append("late read")

    with lock.read():
        w = threading.Thread(target=writer)
        w.start()
        assert writer_waiting.wait(WAIT)
        time.sleep(0.05)  # the writer is queued behind this reader
        r = threading.Thread(target=late_reader)
        r.start()
        time.sleep(0.05)  # the late reader would be inside by now if it were let in
        assert events == []
        events.append("first read done")
    w.join(WAIT)
    r.join(WAIT)
    assert events == ["first read done", "write", "late read"]


def test_an_error_inside_releases_the_lock() -> None:
    lock = ReadWriteLock()
    with pytest.raises(ValueError, match="boom"), lock.write():
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"), lock.read():
        raise ValueError("boom")
    done = threading.Event()

    def writer() -> None:
        with lock.write():
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    assert done.wait(WAIT)
    t.join(WAIT)


def test_readers_queued_behind_an_interrupted_writer_go_on() -> None:
    """A writer waiting for the readers to leave is interrupted (a signal handler's
    exception in the main thread): the readers that queued behind it must not sleep
    until some other writer comes."""
    lock = ReadWriteLock()
    main = threading.current_thread()
    queued, release, got = threading.Event(), threading.Event(), threading.Event()

    class Stop(Exception):
        pass

    class Interrupting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            if threading.current_thread() is main:
                if queued.is_set():
                    time.sleep(0.05)  # let the reader reach its wait
                    raise Stop
                return super().wait(0.01)
            return super().wait(timeout)

    lock._cond = Interrupting(lock._mutex)

    def first() -> None:
        with lock.read():
            release.wait(WAIT)

    def later() -> None:
        while not lock._waiting_writers:
            time.sleep(0.001)
        queued.set()
        with lock.read():
            got.set()

    # Daemons: on the old code the later reader never wakes, and must not hang the run.
    threads = [threading.Thread(target=f, daemon=True) for f in (first, later)]
    threads[0].start()
    while not lock._readers:
        time.sleep(0.001)
    threads[1].start()
    try:
        with pytest.raises(Stop), lock.write():
            pass
        assert got.wait(WAIT)  # without a writer to wake it
    finally:
        release.set()
    for t in threads:
        t.join(WAIT)
