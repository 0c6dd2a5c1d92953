"""A small Worldtree-side client: mints one token per dispatch from the shared
key, sends the envelope, returns the result or raises the typed error the
response carried (``wire_code()`` on it returns the exact wire code).

``BifrostClient`` is synchronous (``httpx.Client``), ``AsyncBifrostClient``
asynchronous. For tests pass ``transport=`` (``httpx.MockTransport``, or
``httpx.ASGITransport(app=…)`` for the async client) or ``http_client=`` (an
``httpx.Client`` / ``httpx.AsyncClient``, or any client with their ``post`` and
``close`` / ``aclose``: :mod:`bifrost.httpclient`; e.g. Starlette's ``TestClient(app)``
for the sync client).
Upserts/puts without an ``idempotency_key`` get a fresh uuid4 key — pass your
own to make retries safe. A memory record given to ``upsert_many`` without an
``id`` gets a fresh uuid4 id, written into that record dict before sending (chunk
ids are one namespace across every tenant: a guessable id could name another
tenant's chunk); read it back from your dict, and send the same dicts again on a
retry so the retry carries the same ids.

The grant (``scope=``) defaults to ``{}``: no restriction, every tenant's records.
A grant or a ``scope_all`` / ``scope_any`` with an axis outside the lattice
(``end_user``, ``group``, ``tenant``, ``agent_self``) raises before anything is sent,
as does a plane name the base URL contradicts.

``scan`` returns one page of the memory plane's records (``next_after_id`` names
where the next starts); ``scan_all`` walks every page (an iterator; an async one
on :class:`AsyncBifrostClient`).

A base URL the server has no Bifrost endpoint under (a combined server's root
instead of ``…/memory``) raises :class:`WrongBaseURL`; arguments holding NaN
or infinity raise ``InvalidArguments`` before anything is sent.

Both clients are one verb surface (:class:`_Verbs`) over their own ``call``: each
verb method shapes its arguments (the plane's argument names come from its
:class:`~bifrost.planes.PlaneSpec`) and returns what ``call`` returns — the
result for :class:`BifrostClient`, an awaitable of it for
:class:`AsyncBifrostClient`. ``mint_token`` lives in :mod:`bifrost.auth` and is
re-exported here.
"""

from __future__ import annotations

import json
import math
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, Generic, TypedDict, TypeVar, Unpack

import httpx

from bifrost.auth.tokens import mint_token
from bifrost.context import DEFAULT_CONSUMER_ID
from bifrost.envelope import WIRE_VERSION
from bifrost.errors import BifrostError, InvalidArguments, error_from_wire
from bifrost.httpclient import AsyncHttpClient, HttpResponse, SyncHttpClient, tls_context
from bifrost.memory.protocol import ScanArgs, Selection
from bifrost.planes import WIRE_PLANES, plane_spec
from bifrost.scope import validate_record_scope, validate_scope
from bifrost.store_base import keywords

__all__ = [
    "AsyncBifrostClient",
    "BifrostClient",
    "WriteOptions",
    "WrongBaseURL",
    "build_envelope",
    "mint_token",
]

_R = TypeVar("_R")
_Http = TypeVar("_Http")
_Transport = TypeVar("_Transport")
_PLANE_PATHS = " or ".join(f"/{name}" for name in WIRE_PLANES)


class WrongBaseURL(BifrostError, code="wrong_base_url", status=404, on_wire=False):
    """The server answered 404 without a wire error: no Bifrost endpoint at that path,
    so the base URL is wrong (it must end in ``/memory`` or ``/affect`` on a combined
    server, or be the root of a standalone plane)."""


def build_envelope(
    verb: str,
    args: dict[str, Any] | None = None,
    *,
    call_id: str | None = None,
    idempotency_key: str | None = None,
    idempotency_class: str | None = None,
) -> bytes:
    env: dict[str, Any] = {
        "wire_version": WIRE_VERSION,
        "call_id": call_id or str(uuid.uuid4()),
        "verb": verb,
        "args": args or {},
    }
    if idempotency_key is not None:
        env["idempotency_key"] = idempotency_key
    if idempotency_class is not None:
        env["idempotency_class"] = idempotency_class
    for name, value in env["args"].items():
        if not _finite(value):
            raise InvalidArguments(
                f"{verb}: args.{name} holds NaN or infinity; embeddings, vectors and "
                "every other number must be finite",
                {"field": name},
            )
    try:
        return json.dumps(env, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(f"{verb}: args are not JSON data ({type(exc).__name__})") from None


def _finite(value: object) -> bool:
    """False when a float anywhere in ``value`` is NaN or infinite (iteratively)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


_KEY_HINT = (
    " (the key given to the client ends in whitespace, e.g. a newline read from a key "
    "file; the provider strips its key file's whitespace: pass key.strip())"
)


def _result(response: HttpResponse, *, plane: str = "", key: bytes = b"") -> Any:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and payload.get("ok") is True and response.status_code == 200:
        return payload.get("result")
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        err = payload["error"]
        message = str(err.get("message", ""))
        if message == "token signature invalid" and key != key.strip():
            message += _KEY_HINT
        raise error_from_wire(
            str(err.get("code", "bifrost.internal")),
            message,
            err.get("details") if isinstance(err.get("details"), dict) else {},
            response.status_code,
        )
    if response.status_code == 404:
        path = response.request.url.path
        raise WrongBaseURL(
            f"no Bifrost endpoint at {path} (HTTP 404): the base URL is wrong - it must "
            f"end in {_PLANE_PATHS} on a combined server (the root for a standalone plane), "
            f"and plane= ({plane!r}) must be the plane served there",
            {"path": path},
        )
    raise error_from_wire(
        "bifrost.internal",
        f"unexpected response (HTTP {response.status_code})",
        {},
        response.status_code,
    )


def _plane_matches_url(base_url: str, plane: str) -> None:
    """A base URL ending in another plane's prefix (``…/memory`` with ``plane="affect"``)
    is a wrong ``plane=``: ValueError naming both, before anything is sent."""
    last = httpx.URL(base_url).path.rstrip("/").rpartition("/")[2]
    if last in WIRE_PLANES and last != plane:
        raise ValueError(
            f"plane={plane!r}, but the base URL ends in /{last}: pass plane={last!r}, "
            f"or the base URL ending in /{plane}"
        )


def _next_after(page: Any) -> str | None:
    """A scan page's ``next_after_id`` (None: the walk is over)."""
    after = page.get("next_after_id") if isinstance(page, dict) else None
    return after if isinstance(after, str) else None


class WriteOptions(TypedDict, total=False):
    """The keyword arguments of a batch write. Without an ``idempotency_key`` the
    client sends a fresh uuid4 (pass your own to make retries safe)."""

    idempotency_key: str | None
    expected_revisions: dict[str, int] | None
    idempotency_class: str | None


class _Verbs(Generic[_R, _Http, _Transport]):
    """One plane's verbs over :meth:`call`; ``_R`` is what ``call`` returns, ``_Http``
    the HTTP client it posts with, ``_Transport`` what httpx's client takes as transport.
    A subclass says how to open its httpx client and how to send one request."""

    def __init__(
        self,
        base_url: str,
        key: bytes,
        *,
        actor: str | None = None,
        scope: dict[str, str] | None = None,
        plane: str | None = None,
        transport: _Transport | None = None,
        http_client: _Http | None = None,
        issuer: str = "heimdall",
        audience: str = DEFAULT_CONSUMER_ID,
        lifetime_s: float = 60,
        timeout: float = 30.0,
    ) -> None:
        # Required, but checked here so the error names the public class, not this one.
        for name, given in (("plane", plane), ("actor", actor)):
            if given is None:
                raise TypeError(
                    f"{type(self).__name__}() missing required keyword argument {name!r}"
                    + (" (who is calling: the token's sub claim)" if name == "actor" else "")
                )
        assert plane is not None and actor is not None  # for the type checker
        self._spec = plane_spec(plane)
        _plane_matches_url(base_url, plane)
        self._key = key
        self.actor = actor
        self.scope = validate_record_scope(dict(scope or {}), "scope")
        self.plane = plane
        self.issuer = issuer
        self.audience = audience
        self.lifetime_s = lifetime_s
        self._owns = http_client is None
        self._http: _Http = (
            http_client if http_client is not None else self._open(base_url, transport, timeout)
        )
        self._base_url = base_url.rstrip("/")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(plane={self.plane!r}, actor=…)"

    def _open(self, base_url: str, transport: _Transport | None, timeout: float) -> _Http:
        raise NotImplementedError

    def _send(self, url: str, body: bytes, headers: dict[str, str]) -> _R:
        raise NotImplementedError

    def call(
        self,
        verb: str,
        args: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        idempotency_class: str | None = None,
        call_id: str | None = None,
    ) -> _R:
        """Send one verb; return its result or raise the typed ``BifrostError``."""
        if args and ("scope_all" in args or "scope_any" in args):
            # The server's own check (InvalidArguments / InvalidFilter), before sending.
            validate_scope(args.get("scope_all"), args.get("scope_any"), max_any=sys.maxsize)
        body = build_envelope(
            verb,
            args,
            call_id=call_id,
            idempotency_key=idempotency_key,
            idempotency_class=idempotency_class,
        )
        token = mint_token(
            self._key,
            plane=self.plane,
            verb=verb,
            body=body,
            actor=self.actor,
            scope=self.scope,
            issuer=self.issuer,
            audience=self.audience,
            lifetime_s=self.lifetime_s,
        )
        path = "/bifrost/handshake" if verb == "handshake" else self._spec.route
        url = self._base_url + path if self._base_url else path
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        return self._send(url, body, headers)

    def handshake(self, client: dict[str, Any] | None = None) -> _R:
        args: dict[str, Any] = {"plane": self.plane}
        if client is not None:
            args["client"] = client
        return self.call("handshake", args)

    def describe_store(self) -> _R:
        return self.call("describe_store")

    def health(self) -> _R:
        return self.call("health")

    def _write(self, verb: str, records: list[dict[str, Any]], options: WriteOptions) -> _R:
        args: dict[str, Any] = {"records": records}
        expected = options.get("expected_revisions")
        if expected is not None:
            args["expected_revisions"] = expected
        return self.call(
            verb,
            args,
            idempotency_key=options.get("idempotency_key") or str(uuid.uuid4()),
            idempotency_class=options.get("idempotency_class"),
        )

    def upsert_many(self, records: list[dict[str, Any]], **options: Unpack[WriteOptions]) -> _R:
        """The memory plane's batch write (``options``: :class:`WriteOptions`). A record
        dict without an ``"id"`` gets a fresh uuid4 one, written into that dict."""
        for record in records if isinstance(records, list) else ():
            if isinstance(record, dict) and "id" not in record:
                record["id"] = str(uuid.uuid4())
        return self._write("upsert_many", records, options)

    def put_many(self, records: list[dict[str, Any]], **options: Unpack[WriteOptions]) -> _R:
        """The affect plane's batch write (``options``: :class:`WriteOptions`)."""
        return self._write("put_many", records, options)

    def search(
        self,
        vector: list[float],
        *,
        top_k: int,
        metadata_filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> _R:
        """The memory plane's search; ``metadata_filter`` only on the fields the store
        declares (``describe_store()["filterable_metadata_fields"]``)."""
        args: dict[str, Any] = {"vector": vector, "top_k": top_k, **kwargs}
        if metadata_filter is not None:
            args["metadata_filter"] = metadata_filter
        return self.call("search", args)

    def scan(self, **args: Unpack[ScanArgs]) -> _R:
        """One page of the memory plane's ``scan`` (the keywords of
        :class:`~bifrost.memory.protocol.ScanArgs`; those left None are not sent):
        ``{"items": [...], "next_after_id": str | None}``, records in ``chunk_id``
        order after ``after_id``, always within the grant. Pass ``next_after_id`` back
        as ``after_id`` for the next page (``scan_all`` does)."""
        given = keywords("scan", args, ScanArgs)
        return self.call("scan", {name: v for name, v in given.items() if v is not None})

    def get(self, id_or_key: str) -> _R:
        return self.call("get", {self._spec.id_arg: id_or_key})

    def get_many(self, ids: list[str]) -> _R:
        return self.call("get_many", {self._spec.ids_arg: ids})

    def delete_many(self, ids: list[str]) -> _R:
        return self.call("delete_many", {self._spec.ids_arg: ids})

    def history(self, key: str, **kwargs: Any) -> _R:
        return self.call("history", {"key": key, **kwargs})

    def list(self, **kwargs: Any) -> _R:
        return self.call("list", dict(kwargs))


class BifrostClient(_Verbs[Any, SyncHttpClient, httpx.BaseTransport]):
    """Synchronous client for one plane of one consumer."""

    def _open(
        self, base_url: str, transport: httpx.BaseTransport | None, timeout: float
    ) -> httpx.Client:
        return httpx.Client(
            base_url=base_url, transport=transport, timeout=timeout, verify=tls_context()
        )

    def _send(self, url: str, body: bytes, headers: dict[str, str]) -> Any:
        response = self._http.post(url, content=body, headers=headers)
        return _result(response, plane=self.plane, key=self._key)

    def scan_all(
        self,
        *,
        page_size: int | None = None,
        after_id: str | None = None,
        **selection: Unpack[Selection],
    ) -> Iterator[dict[str, Any]]:
        """Every record of the scan of ``selection``, page after page (``page_size``
        records a call), in ``chunk_id`` order: each page starts after the last id of
        the one before, so a record that exists, unchanged and in scope, for the whole
        walk comes exactly once."""
        while True:
            page = self.scan(limit=page_size, after_id=after_id, **selection)
            yield from page["items"]
            after_id = _next_after(page)
            if after_id is None:
                return

    def close(self) -> None:
        if self._owns:
            self._http.close()

    def __enter__(self) -> BifrostClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncBifrostClient(_Verbs[Awaitable[Any], AsyncHttpClient, httpx.AsyncBaseTransport]):
    """Asynchronous client (``httpx.AsyncClient``); same methods, awaited."""

    def _open(
        self, base_url: str, transport: httpx.AsyncBaseTransport | None, timeout: float
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=base_url, transport=transport, timeout=timeout, verify=tls_context()
        )

    async def _send(self, url: str, body: bytes, headers: dict[str, str]) -> Any:
        response = await self._http.post(url, content=body, headers=headers)
        return _result(response, plane=self.plane, key=self._key)

    async def scan_all(
        self,
        *,
        page_size: int | None = None,
        after_id: str | None = None,
        **selection: Unpack[Selection],
    ) -> AsyncIterator[dict[str, Any]]:
        """:meth:`BifrostClient.scan_all`, asynchronously (``async for``)."""
        while True:
            page = await self.scan(limit=page_size, after_id=after_id, **selection)
            for item in page["items"]:
                yield item
            after_id = _next_after(page)
            if after_id is None:
                return

    async def aclose(self) -> None:
        if self._owns:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncBifrostClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
