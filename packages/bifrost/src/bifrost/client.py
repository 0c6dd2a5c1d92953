"""A small Worldtree-side client: mints one token per dispatch from the shared
key, sends the envelope, returns the result or raises the typed error the
response carried (``wire_code()`` on it returns the exact wire code).

``BifrostClient`` is synchronous (``httpx.Client``), ``AsyncBifrostClient``
asynchronous. For tests pass ``transport=`` (``httpx.MockTransport``, or
``httpx.ASGITransport(app=…)`` for the async client) or ``http_client=`` (any
``httpx.Client``, e.g. Starlette's ``TestClient(app)`` for the sync client).
Upserts/puts without an ``idempotency_key`` get a fresh uuid4 key — pass your
own to make retries safe.

A base URL the server has no Bifrost endpoint under (a combined server's root
instead of ``…/memory``) raises :class:`WrongBaseURL`; arguments holding NaN
or infinity raise ``InvalidArguments`` before anything is sent.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from typing import Any

import httpx
import jwt

from bifrost.envelope import WIRE_VERSION
from bifrost.errors import BifrostError, InvalidArguments, error_from_wire

__all__ = ["AsyncBifrostClient", "BifrostClient", "WrongBaseURL", "build_envelope", "mint_token"]


class WrongBaseURL(BifrostError):
    """The server answered 404 without a wire error: no Bifrost endpoint at that path,
    so the base URL is wrong (it must end in ``/memory`` or ``/affect`` on a combined
    server, or be the root of a standalone plane)."""

    code_suffix = "wrong_base_url"
    http_status = 404


def mint_token(
    key: bytes,
    *,
    plane: str,
    verb: str,
    body: bytes,
    actor: str,
    scope: dict[str, str] | None = None,
    issuer: str = "heimdall",
    audience: str = "ratatoskr",
    lifetime_s: float = 60,
    now: float | None = None,
    jti: str | None = None,
) -> str:
    """An HS256 per-dispatch token bound to ``body``, ``plane`` and ``verb``."""
    iat = int(time.time() if now is None else now)
    claims = {
        "iss": issuer,
        "aud": audience,
        "sub": actor,
        "iat": iat,
        "exp": iat + int(lifetime_s),
        "jti": jti or str(uuid.uuid4()),
        "bifrost": {
            "plane": plane,
            "verb": verb,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "scope": dict(scope or {}),
        },
    }
    return jwt.encode(claims, key, algorithm="HS256")


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


def _result(response: httpx.Response) -> Any:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and payload.get("ok") is True and response.status_code == 200:
        return payload.get("result")
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        err = payload["error"]
        raise error_from_wire(
            str(err.get("code", "bifrost.internal")),
            str(err.get("message", "")),
            err.get("details") if isinstance(err.get("details"), dict) else {},
            response.status_code,
        )
    if response.status_code == 404:
        path = response.request.url.path
        raise WrongBaseURL(
            f"no Bifrost endpoint at {path} (HTTP 404): the base URL is wrong - it must "
            "end in /memory or /affect on a combined server (the root for a standalone plane)",
            {"path": path},
        )
    raise error_from_wire(
        "bifrost.internal",
        f"unexpected response (HTTP {response.status_code})",
        {},
        response.status_code,
    )


class _Base:
    def __init__(
        self,
        key: bytes,
        *,
        actor: str,
        scope: dict[str, str] | None,
        plane: str,
        issuer: str,
        audience: str,
        lifetime_s: float,
    ) -> None:
        if plane not in ("memory", "affect"):
            raise ValueError("plane must be memory or affect")
        self._key = key
        self.actor = actor
        self.scope = dict(scope or {})
        self.plane = plane
        self.issuer = issuer
        self.audience = audience
        self.lifetime_s = lifetime_s

    def __repr__(self) -> str:
        return f"{type(self).__name__}(plane={self.plane!r}, actor=…)"

    def _prepare(
        self,
        verb: str,
        args: dict[str, Any] | None,
        idempotency_key: str | None,
        idempotency_class: str | None,
        call_id: str | None,
    ) -> tuple[str, bytes, dict[str, str]]:
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
        path = "/bifrost/handshake" if verb == "handshake" else f"/bifrost/{self.plane}-call"
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        return path, body, headers

    # Argument shaping shared by both clients (per-plane names).
    def _id_arg(self) -> str:
        return "chunk_id" if self.plane == "memory" else "key"

    def _ids_arg(self) -> str:
        return "ids" if self.plane == "memory" else "keys"

    @staticmethod
    def _write_args(
        records: list[dict[str, Any]], expected_revisions: dict[str, int] | None
    ) -> dict[str, Any]:
        args: dict[str, Any] = {"records": records}
        if expected_revisions is not None:
            args["expected_revisions"] = expected_revisions
        return args


class BifrostClient(_Base):
    """Synchronous client for one plane of one consumer."""

    def __init__(
        self,
        base_url: str,
        key: bytes,
        *,
        actor: str,
        scope: dict[str, str] | None = None,
        plane: str,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
        issuer: str = "heimdall",
        audience: str = "ratatoskr",
        lifetime_s: float = 60,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(
            key,
            actor=actor,
            scope=scope,
            plane=plane,
            issuer=issuer,
            audience=audience,
            lifetime_s=lifetime_s,
        )
        self._owns = http_client is None
        self._http = http_client or httpx.Client(
            base_url=base_url, transport=transport, timeout=timeout
        )
        self._base_url = base_url.rstrip("/")

    def close(self) -> None:
        if self._owns:
            self._http.close()

    def __enter__(self) -> BifrostClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(
        self,
        verb: str,
        args: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        idempotency_class: str | None = None,
        call_id: str | None = None,
    ) -> Any:
        """Send one verb; return its result or raise the typed ``BifrostError``."""
        path, body, headers = self._prepare(verb, args, idempotency_key, idempotency_class, call_id)
        url = self._base_url + path if self._base_url else path
        return _result(self._http.post(url, content=body, headers=headers))

    def handshake(self, client: dict[str, Any] | None = None) -> Any:
        args: dict[str, Any] = {"plane": self.plane}
        if client is not None:
            args["client"] = client
        return self.call("handshake", args)

    def describe_store(self) -> Any:
        return self.call("describe_store")

    def health(self) -> Any:
        return self.call("health")

    def upsert_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> Any:
        args = self._write_args(records, expected_revisions)
        return self.call(
            "upsert_many",
            args,
            idempotency_key=idempotency_key or str(uuid.uuid4()),
            idempotency_class=idempotency_class,
        )

    def put_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> Any:
        args = self._write_args(records, expected_revisions)
        return self.call(
            "put_many",
            args,
            idempotency_key=idempotency_key or str(uuid.uuid4()),
            idempotency_class=idempotency_class,
        )

    def search(self, vector: list[float], *, top_k: int, **kwargs: Any) -> Any:
        return self.call("search", {"vector": vector, "top_k": top_k, **kwargs})

    def get(self, id_or_key: str) -> Any:
        return self.call("get", {self._id_arg(): id_or_key})

    def get_many(self, ids: list[str]) -> Any:
        return self.call("get_many", {self._ids_arg(): ids})

    def delete_many(self, ids: list[str]) -> Any:
        return self.call("delete_many", {self._ids_arg(): ids})

    def history(self, key: str, **kwargs: Any) -> Any:
        return self.call("history", {"key": key, **kwargs})

    def list(self, **kwargs: Any) -> Any:
        return self.call("list", dict(kwargs))


class AsyncBifrostClient(_Base):
    """Asynchronous client (``httpx.AsyncClient``); same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        key: bytes,
        *,
        actor: str,
        scope: dict[str, str] | None = None,
        plane: str,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
        issuer: str = "heimdall",
        audience: str = "ratatoskr",
        lifetime_s: float = 60,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(
            key,
            actor=actor,
            scope=scope,
            plane=plane,
            issuer=issuer,
            audience=audience,
            lifetime_s=lifetime_s,
        )
        self._owns = http_client is None
        self._http = http_client or httpx.AsyncClient(
            base_url=base_url, transport=transport, timeout=timeout
        )
        self._base_url = base_url.rstrip("/")

    async def aclose(self) -> None:
        if self._owns:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncBifrostClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def call(
        self,
        verb: str,
        args: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        idempotency_class: str | None = None,
        call_id: str | None = None,
    ) -> Any:
        """Send one verb; return its result or raise the typed ``BifrostError``."""
        path, body, headers = self._prepare(verb, args, idempotency_key, idempotency_class, call_id)
        url = self._base_url + path if self._base_url else path
        return _result(await self._http.post(url, content=body, headers=headers))

    async def handshake(self, client: dict[str, Any] | None = None) -> Any:
        args: dict[str, Any] = {"plane": self.plane}
        if client is not None:
            args["client"] = client
        return await self.call("handshake", args)

    async def describe_store(self) -> Any:
        return await self.call("describe_store")

    async def health(self) -> Any:
        return await self.call("health")

    async def upsert_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> Any:
        args = self._write_args(records, expected_revisions)
        return await self.call(
            "upsert_many",
            args,
            idempotency_key=idempotency_key or str(uuid.uuid4()),
            idempotency_class=idempotency_class,
        )

    async def put_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> Any:
        args = self._write_args(records, expected_revisions)
        return await self.call(
            "put_many",
            args,
            idempotency_key=idempotency_key or str(uuid.uuid4()),
            idempotency_class=idempotency_class,
        )

    async def search(self, vector: list[float], *, top_k: int, **kwargs: Any) -> Any:
        return await self.call("search", {"vector": vector, "top_k": top_k, **kwargs})

    async def get(self, id_or_key: str) -> Any:
        return await self.call("get", {self._id_arg(): id_or_key})

    async def get_many(self, ids: list[str]) -> Any:
        return await self.call("get_many", {self._ids_arg(): ids})

    async def delete_many(self, ids: list[str]) -> Any:
        return await self.call("delete_many", {self._ids_arg(): ids})

    async def history(self, key: str, **kwargs: Any) -> Any:
        return await self.call("history", {"key": key, **kwargs})

    async def list(self, **kwargs: Any) -> Any:
        return await self.call("list", dict(kwargs))
