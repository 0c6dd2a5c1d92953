"""``GET /metrics``: the provider's Prometheus metrics (the ``prometheus-client`` library).

Per request (counted by :mod:`ratatoskr.provider.observe`, which sees every
memory and affect call through bifrost's ``AppHooks.on_call`` and every VMP
route through its middleware):

- ``ratatoskr_requests_total{plane,verb,status,code}``: ``code`` is the wire
  error code, ``ok`` for a success, ``http_<status>`` when no plane answered;
- ``ratatoskr_request_duration_seconds{plane,verb}``: a latency histogram;
- ``ratatoskr_token_replays_total{plane}``: tokens refused as already used;
- ``ratatoskr_idempotent_replays_total{plane,verb}``: writes answered from the
  ledger (``"replayed": true``);
- ``ratatoskr_conflicts_total{plane,code}``: 409 answers (idempotency
  conflicts, revision mismatches).

At scrape time, from the files (the same for every worker):
``ratatoskr_database_file_bytes{plane}``, ``ratatoskr_database_wal_bytes{plane}``
and ``ratatoskr_index_rows{plane}`` (memory chunks, VMP records; affect has no
cheap count and is left out).

Labels are never taken from a request as sent: ``verb`` is one of the plane's
known verbs (bifrost's ``MEMORY_VERBS`` / ``AFFECT_VERBS``, ``handshake``, a VMP
route template) or ``other``; ``code`` is one of the constant error codes.

With ``--workers N`` every worker writes its samples to files in a private
directory the supervisor creates (``PROMETHEUS_MULTIPROC_DIR``) and removes at
exit; a scrape, answered by any worker, sums them all. A dead worker's counts
stay in the sum (its files are kept), so counters never go backwards.
"""

from __future__ import annotations

import functools
import hmac
import os
from collections.abc import Awaitable, Callable, Iterable

import anyio.to_thread
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ratatoskr.provider.preflight import OpenPlanes
from ratatoskr.provider.settings import Plane, Settings, is_dsn
from ratatoskr.sqlite import MEMORY_PATH
from ratatoskr.vmp import is_loopback_host

__all__ = ["Metrics", "metrics_endpoint"]

# No ``*_created`` series beside every counter (half the output, no use to an alert).
disable_created_metrics()  # type: ignore[no-untyped-call]

# Seconds: from a fraction of a millisecond (a small VMP search) to a large upload.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _FileCollector(Collector):
    """Database and WAL sizes and row counts, read when scraped."""

    def __init__(self, files: dict[str, str], counts: dict[str, Callable[[], int]]) -> None:
        self._files = files
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        size = GaugeMetricFamily(
            "ratatoskr_database_file_bytes", "Size of each plane's database file.", labels=["plane"]
        )
        wal = GaugeMetricFamily(
            "ratatoskr_database_wal_bytes",
            "Size of each plane's write-ahead log (0 when absent).",
            labels=["plane"],
        )
        for plane, path in self._files.items():
            size.add_metric([plane], float(_size(path)))
            wal.add_metric([plane], float(_size(path + "-wal")))
        rows = GaugeMetricFamily(
            "ratatoskr_index_rows",
            "Rows in each plane's index (memory chunks, VMP records).",
            labels=["plane"],
        )
        for plane, count in self._counts.items():
            try:
                rows.add_metric([plane], float(count()))
            except Exception:  # noqa: S112 - an unreadable store is /readyz's finding
                continue
        return [size, wal, rows]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class Metrics:
    """This process's metric objects, and the scrape that renders them (summed over
    every worker's files when ``multiprocess_dir`` is given)."""

    def __init__(
        self,
        files: dict[str, str] | None = None,
        counts: dict[str, Callable[[], int]] | None = None,
        *,
        multiprocess_dir: str | None = None,
    ) -> None:
        self._dir = multiprocess_dir
        # Multi-process: the samples go to files; a scrape reads them with a fresh
        # registry. One process: the metrics live in this registry.
        own = None if multiprocess_dir else CollectorRegistry(auto_describe=True)
        self._own = own
        self._files = _FileCollector(files or {}, counts or {})

        def counter(name: str, documentation: str, labels: list[str]) -> Counter:
            return Counter(name, documentation, labels, registry=own)

        self.requests = counter(
            "ratatoskr_requests",
            "Requests by plane, verb, HTTP status and outcome code.",
            ["plane", "verb", "status", "code"],
        )
        self.duration = Histogram(
            "ratatoskr_request_duration_seconds",
            "Time from a request's arrival to its answer, by plane and verb.",
            ["plane", "verb"],
            buckets=_BUCKETS,
            registry=own,
        )
        self.token_replays = counter(
            "ratatoskr_token_replays",
            "Calls refused because their token was already used.",
            ["plane"],
        )
        self.idempotent_replays = counter(
            "ratatoskr_idempotent_replays",
            "Writes answered from the idempotency ledger (replayed: true).",
            ["plane", "verb"],
        )
        self.conflicts = counter(
            "ratatoskr_conflicts",
            "Calls answered 409 (idempotency conflict, revision mismatch).",
            ["plane", "code"],
        )
        self._children: dict[tuple[str, str, int, str], tuple[Counter, Histogram]] = {}
        if own is not None:
            own.register(self._files)

    def observe(
        self,
        plane: str,
        verb: str,
        status: int,
        code: str,
        duration_s: float,
        *,
        token_replayed: bool = False,
        replayed: bool = False,
    ) -> None:
        """Count one request (every label a constant: see the module docstring)."""
        key = (plane, verb, status, code)
        children = self._children.get(key)
        if children is None:
            # The labelled children, looked up once per label set (the lookup takes a
            # lock and builds the label tuple each time); label sets are few.
            children = (
                self.requests.labels(plane, verb, str(status), code),
                self.duration.labels(plane, verb),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(duration_s)
        if token_replayed:
            self.token_replays.labels(plane).inc()
        if replayed:
            self.idempotent_replays.labels(plane, verb).inc()
        if status == 409:
            self.conflicts.labels(plane, code).inc()

    def render(self) -> bytes:
        """The text exposition (blocking: reads files)."""
        if self._own is not None:
            return generate_latest(self._own)
        registry = CollectorRegistry(auto_describe=True)
        assert self._dir is not None
        MultiProcessCollector(registry, path=self._dir)  # type: ignore[no-untyped-call]
        registry.register(self._files)
        return generate_latest(registry)


def plane_files(
    settings: Settings, planes: tuple[Plane, ...], opened: OpenPlanes
) -> tuple[dict[str, str], dict[str, Callable[[], int]]]:
    """Each served plane's database path (file-backed ones) and its row count."""
    files: dict[str, str] = {
        p: settings.db_path(p)
        for p in planes
        if settings.db_path(p) != MEMORY_PATH and not is_dsn(settings.db_path(p))
    }
    counts: dict[str, Callable[[], int]] = {
        name: functools.partial(count, plane.store)
        for name, plane in opened.served.items()
        if (count := plane.entry.count) is not None
    }
    return files, counts


def metrics_endpoint(
    metrics: Metrics, settings: Settings
) -> Callable[[Request], Awaitable[Response]]:
    """``GET /metrics``. With ``RATATOSKR_METRICS_TOKEN`` set, a scrape must send it as
    a Bearer token; unset, /metrics is open on a loopback listener and refused (403)
    on any other, so a public listener never shows its traffic by default."""
    secret = settings.metrics_token.get_secret_value() if settings.metrics_token else None
    loopback = is_loopback_host(settings.host)

    async def endpoint(request: Request) -> Response:
        if secret is None and not loopback:
            return JSONResponse(
                {"error": "set RATATOSKR_METRICS_TOKEN to scrape a non-loopback listener"},
                status_code=403,
            )
        if secret is not None:
            scheme, _, sent = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                sent.strip().encode(), secret.encode()
            ):
                return JSONResponse(
                    {"error": "metrics token missing or wrong"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        body = await anyio.to_thread.run_sync(metrics.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return endpoint
