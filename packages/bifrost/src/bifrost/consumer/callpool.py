"""The pool of threads a plane's store calls run in, off the event loop.

As many threads as anyio's default limiter allows, without anyio's per-call backend
lookup (an import_module per call was 5% of a small search's server time), and
without ``loop.run_in_executor``'s second future chained to the pool's: the worker
hands the outcome to the loop itself, one ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["POOL_THREADS", "run_off_loop"]

_T = TypeVar("_T")

POOL_THREADS = 40
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool  # noqa: PLW0603 - one pool per process, made on first use (after fork/spawn)
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(
                    POOL_THREADS, thread_name_prefix="bifrost-call"
                )
    return _pool


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if not future.cancelled():
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


async def run_off_loop(func: Callable[..., _T], *args: Any) -> _T:
    """Run ``func(*args)`` in the process's call pool and await its result.

    What ``loop.run_in_executor`` does, without chaining a second future to the
    pool's: the worker hands the outcome to the loop itself (one
    ``call_soon_threadsafe``). A call still queued when its caller is cancelled
    never runs, as with ``run_in_executor``."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def work() -> None:
        try:
            result = func(*args)
        except BaseException as exc:  # handed to the awaiting task, as the pool would
            loop.call_soon_threadsafe(_settle, future, False, exc)
        else:
            loop.call_soon_threadsafe(_settle, future, True, result)

    queued = _executor().submit(work)
    try:
        return await future
    except asyncio.CancelledError:
        queued.cancel()
        raise
