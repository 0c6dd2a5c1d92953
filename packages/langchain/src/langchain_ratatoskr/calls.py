"""How a store reaches the memory plane: over HTTP with bifrost's clients (a token
minted per call from the Heimdall key), or in-process over a local memory file
through ``dispatch_memory_call`` (no server, no token: the grant is the store's scope).

Both answer one verb at a time, synchronously (:meth:`call`) or awaited
(:meth:`acall`), with the verb's result or the typed ``BifrostError`` it raised.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, Protocol

from bifrost.client import AsyncBifrostClient, BifrostClient, build_envelope
from bifrost.context import DEFAULT_CONSUMER_ID, DispatchContext
from bifrost.memory.dispatch import dispatch_memory_call
from bifrost.memory.protocol import MemoryDataStore

__all__ = ["HttpCalls", "LocalCalls", "MemoryCalls"]

# Writes carry an idempotency key (a fresh one per call: a retry by the caller is a
# new upsert of the same ids, which the plane applies as a replacement).
_WRITES = frozenset({"upsert_many"})


class MemoryCalls(Protocol):
    """One memory plane, one grant."""

    def call(self, verb: str, args: dict[str, Any]) -> Any: ...

    async def acall(self, verb: str, args: dict[str, Any]) -> Any: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


class HttpCalls:
    """The memory plane at ``url`` (a provider's ``…/memory``, or a standalone memory
    plane's root), through :class:`BifrostClient` and, for awaited calls, an
    :class:`AsyncBifrostClient` opened on first use in the running event loop (a
    client's connections belong to the loop that opened them; a call from another
    loop opens another client)."""

    def __init__(
        self,
        url: str,
        key: bytes,
        *,
        actor: str,
        scope: dict[str, str],
        issuer: str = "heimdall",
        audience: str = DEFAULT_CONSUMER_ID,
        timeout: float = 30.0,
    ) -> None:
        self._options: dict[str, Any] = {
            "plane": "memory",
            "actor": actor,
            "scope": scope,
            "issuer": issuer,
            "audience": audience,
            "timeout": timeout,
        }
        self._url = url
        self._key = key
        self._client = BifrostClient(url, key, **self._options)
        self._aclient: AsyncBifrostClient | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None

    def call(self, verb: str, args: dict[str, Any]) -> Any:
        key = str(uuid.uuid4()) if verb in _WRITES else None
        return self._client.call(verb, args, idempotency_key=key)

    async def acall(self, verb: str, args: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aloop is not loop:
            self._aclient = AsyncBifrostClient(self._url, self._key, **self._options)
            self._aloop = loop
        key = str(uuid.uuid4()) if verb in _WRITES else None
        return await self._aclient.call(verb, args, idempotency_key=key)

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        self._client.close()
        if self._aclient is not None and self._aloop is asyncio.get_running_loop():
            await self._aclient.aclose()
        self._aclient = None


class LocalCalls:
    """A memory store opened in this process: each call is the envelope bifrost's
    client would send, dispatched as the server would with the store's scope as the
    grant. Awaited calls run in a worker thread (the store's connections may be used
    off their creating thread). ``owned``: close the store with this object."""

    def __init__(
        self, store: MemoryDataStore, *, actor: str, scope: dict[str, str], owned: bool
    ) -> None:
        self._store = store
        self._actor = actor
        self._scope = scope
        self._owned = owned

    def call(self, verb: str, args: dict[str, Any]) -> Any:
        key = str(uuid.uuid4()) if verb in _WRITES else None
        # The client's envelope, checks included (NaN, non-JSON values), as JSON data.
        envelope = json.loads(build_envelope(verb, args, idempotency_key=key))
        ctx = DispatchContext(actor=self._actor, scope=dict(self._scope), verb=verb)
        return dispatch_memory_call(self._store, envelope, ctx)

    async def acall(self, verb: str, args: dict[str, Any]) -> Any:
        return await asyncio.to_thread(self.call, verb, args)

    def close(self) -> None:
        if self._owned:
            close = getattr(self._store, "close", None)
            if close is not None:
                close()

    async def aclose(self) -> None:
        self.close()
