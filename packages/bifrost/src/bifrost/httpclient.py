"""What a Bifrost client needs of the HTTP client it posts with, and nothing more.

:class:`~bifrost.client.BifrostClient` posts one envelope per call and reads the
answer's status and JSON body (and, for a bare 404, the path it asked for);
:class:`~bifrost.consumer.testing.support.Wire` also reads headers and text.
These protocols say exactly that, so any client with those methods fits:
``httpx.Client`` / ``httpx.AsyncClient``, and Starlette's ``TestClient``, which
is built on ``httpx2`` (a distinct package whose classes are not httpx's).
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["AsyncHttpClient", "HttpResponse", "SyncHttpClient", "tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context the clients of this process verify servers with: httpx's default
    (its CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as the environment says at
    the first call), made once. Left to itself httpx makes one per client, for an
    ``http://`` URL too: 30-40 ms of CPU each, loading the CA bundle. A context is safe
    to share between clients and threads."""
    import httpx  # noqa: PLC0415 - only clients that post over HTTP need it

    return httpx.create_ssl_context()


class HttpURL(Protocol):
    @property
    def path(self) -> str: ...


class HttpRequest(Protocol):
    @property
    def url(self) -> HttpURL: ...


class HttpResponse(Protocol):
    """An answer: status, headers, body (raw, as text, as JSON) and the request it answers."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...

    @property
    def text(self) -> str: ...

    @property
    def request(self) -> HttpRequest: ...

    def json(self, **kwargs: Any) -> Any: ...


class SyncHttpClient(Protocol):
    """Posts bytes and answers synchronously (``httpx.Client``, Starlette's ``TestClient``)."""

    def post(self, url: str, *, content: bytes, headers: dict[str, str]) -> HttpResponse: ...

    def close(self) -> None: ...


class AsyncHttpClient(Protocol):
    """Posts bytes and answers asynchronously (``httpx.AsyncClient``)."""

    async def post(self, url: str, *, content: bytes, headers: dict[str, str]) -> HttpResponse: ...

    async def aclose(self) -> None: ...
