"""open_pool waits for its first connections as long as the DSN's connect_timeout says
when it names one (the operator's figure), else the options'."""

from __future__ import annotations

from typing import Any

import psycopg_pool
import pytest

from ratatoskr.postgres import PoolOptions, open_pool
from ratatoskr.storage import StorageUnavailable

REFUSED = "postgresql://nobody@127.0.0.1:1/app"


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, Any]]:
    """Each pool's open wait, and the connect_timeout its connections were given; the
    open fails as a refused server's would, without waiting."""
    seen: list[tuple[float, Any]] = []

    def open_(self: psycopg_pool.ConnectionPool, wait: bool = False, timeout: float = 30) -> None:
        kwargs: Any = self.kwargs
        seen.append((timeout, kwargs.get("connect_timeout")))
        raise psycopg_pool.PoolTimeout("pool initialization incomplete")

    monkeypatch.setattr(psycopg_pool.ConnectionPool, "open", open_)
    return seen


@pytest.mark.parametrize(
    ("dsn", "wait", "given"),
    [
        (REFUSED + "?connect_timeout=1", 1.0, None),  # the DSN's, left to libpq
        (REFUSED + "?connect_timeout=3", 3.0, None),
        (REFUSED, 7.0, 7),  # none named: the options', for both
        (REFUSED + "?connect_timeout=0", 1.0, None),  # libpq's "wait forever": 1 s here
    ],
)
def test_the_wait_follows_the_dsns_connect_timeout(
    waits: list[tuple[float, Any]], dsn: str, wait: float, given: Any
) -> None:
    with pytest.raises(StorageUnavailable):
        open_pool(dsn, PoolOptions(connect_timeout=7))
    assert waits == [(wait, given)]


def test_a_connect_timeout_that_is_no_number_keeps_the_options_wait(
    waits: list[tuple[float, Any]],
) -> None:
    with pytest.raises(StorageUnavailable):
        open_pool(REFUSED + "?connect_timeout=soon", PoolOptions(connect_timeout=4))
    assert waits == [(4.0, None)]
