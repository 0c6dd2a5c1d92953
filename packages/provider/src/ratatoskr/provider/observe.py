"""One log line and one count per request, and the one log format of the process.

:class:`ObserveMiddleware` wraps the provider app. For a memory or affect call
bifrost reports the call (``AppHooks.on_call``, wired by :func:`call_hook`) and
logs its ``bifrost call …`` line on ``bifrost.consumer``; the middleware holds
that line back until the answer is sent, adds ``reason=`` to a 401 (the check
that failed, e.g. ``token replayed``, read from the answer's error message —
never the token) and emits it then, so each call is logged once. A VMP request
is logged once on ``ratatoskr.request`` as ``vmp call plane=vmp verb=<route
template> status=… code=… duration_ms=…``. ``/healthz``, ``/readyz`` and
``/metrics`` are logged at DEBUG (probes and scrapes would flood INFO).

Every call line carries structured fields (``plane``, ``verb``, ``status``,
``code``, ``duration_ms``, ``call_id`` and, for a 401, ``reason``) that the
JSON format (``RATATOSKR_LOG_FORMAT=json``) writes as keys of the line's object.

:func:`log_config` is the ``logging.config`` dict of the provider and of uvicorn
(its ``log_config``): one handler on the root logger, uvicorn's loggers
propagating to it, so uvicorn, bifrost, VMP and the provider share one format.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import re
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bifrost.consumer import CallRecord
from bifrost.errors import loggable_id
from bifrost.jsoncodec import json_loads_exact
from ratatoskr.provider.metrics import Metrics

__all__ = ["CALL_FIELDS", "JsonFormatter", "ObserveMiddleware", "call_hook", "log_config"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
CALL_FIELDS = "ratatoskr_call"  # the LogRecord attribute holding a call line's fields
_log = logging.getLogger("ratatoskr.request")
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.]{0,63}")
_REASON = re.compile(r"[ -~]{1,120}")  # printable ASCII, one line
# Answers read back for their error message or "replayed" flag are small.
_PEEK_BYTES = 4096


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and a call's fields."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, CALL_FIELDS, None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def log_config(level: str, fmt: str) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` dict for ``RATATOSKR_LOG_LEVEL`` / ``_FORMAT``."""
    formatter: dict[str, Any] = (
        {"()": "ratatoskr.provider.observe.JsonFormatter"}
        if fmt == "json"
        else {"format": TEXT_FORMAT}
    )
    uvicorn = {"handlers": [], "propagate": True}
    # Access lines only at debug: uvicorn's access_log=False does not reach the workers
    # (each applies this dict itself), so the logger's level keeps them out.
    access = {**uvicorn, "level": "INFO" if level == "debug" else "WARNING"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"ratatoskr": formatter},
        "handlers": {
            "ratatoskr": {
                "class": "logging.StreamHandler",
                "formatter": "ratatoskr",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["ratatoskr"], "level": level.upper()},
        "loggers": {
            "uvicorn": dict(uvicorn),
            "uvicorn.error": dict(uvicorn),
            "uvicorn.access": access,
        },
    }


@dataclass
class _Call:
    """What one request's parts report to the middleware (via a context variable)."""

    record: CallRecord | None = None
    line: logging.LogRecord | None = None


_current: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "ratatoskr_call", default=None
)


def call_hook(record: CallRecord) -> None:
    """bifrost's ``on_call``: hand the call's facts to the request's middleware."""
    call = _current.get()
    if call is not None:
        call.record = record


class _HoldCallLines(logging.Filter):
    """On ``bifrost.consumer``: hold a call line back for the middleware to finish."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str) or not record.msg.startswith("bifrost call "):
            return True
        call = _current.get()
        if call is None or getattr(record, CALL_FIELDS, None) is not None:
            return True
        call.line = record
        return False


_HOLD = _HoldCallLines()


def _peek(body: bytes) -> dict[str, Any]:
    try:
        value = json_loads_exact(body)  # orjson's speed, json's answer
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _error_of(answer: dict[str, Any]) -> tuple[str | None, str | None]:
    """(code, message) of an error answer: bifrost's ``{"error": {"code", "message"}}``
    or VMP's ``{"error": message, "code": code}``; each only when it is plain text."""
    error = answer.get("error")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
    else:
        code, message = answer.get("code"), error
    code = code if isinstance(code, str) and _CODE.fullmatch(code) else None
    message = message if isinstance(message, str) and _REASON.fullmatch(message) else None
    return code, message


class ObserveMiddleware:
    """Pure ASGI: log and count each request once (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        planes: tuple[str, ...],
        verbs: Mapping[str, Collection[str] | None],
        routes: Mapping[str, Collection[str]],
        metrics: Metrics | None,
        top_level: Collection[str] = ("/healthz", "/readyz", "/metrics"),
    ) -> None:
        """``verbs``: each Bifrost plane's verbs (the ``verb`` label); a plane whose
        verbs are None is labelled by its route template, from ``routes``."""
        self.app = app
        self._planes = planes
        self._verbs = {p: frozenset(v) for p, v in verbs.items() if v is not None}
        self._routes = {p: frozenset(routes.get(p, ())) for p, v in verbs.items() if v is None}
        self._metrics = metrics
        self._top = frozenset(top_level)
        hold = logging.getLogger("bifrost.consumer")
        if _HOLD not in hold.filters:
            hold.addFilter(_HOLD)

    def _route(self, path: str) -> tuple[str | None, str]:
        """(plane, path inside the plane), or (None, path) for the provider's own routes."""
        if path in self._top:
            return None, path
        if len(self._planes) == 1:
            return self._planes[0], path
        first, _, rest = path.lstrip("/").partition("/")
        if first in self._planes:
            return first, "/" + rest
        return None, path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        plane, inner = self._route(scope["path"])
        call = _Call()
        token = _current.set(call)
        status = 500
        peek = bytearray()
        peeking = False

        async def observed(message: Message) -> None:
            nonlocal status, peeking
            if message["type"] == "http.response.start":
                status = int(message["status"])
                length = _content_length(message)
                peeking = plane is not None and (
                    status >= 400
                    or (plane not in self._routes and length is not None and length <= 2048)
                )
            elif message["type"] == "http.response.body" and peeking and len(peek) < _PEEK_BYTES:
                peek.extend(message.get("body", b"")[: _PEEK_BYTES - len(peek)])
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            _current.reset(token)
            duration = time.perf_counter() - start
            if plane is None:
                _log.debug(
                    "request path=%s status=%d duration_ms=%.1f",
                    inner if inner in self._top else "other",
                    status,
                    duration * 1000,
                )
            else:
                self._finish(plane, inner, call, status, bytes(peek), duration)

    def _finish(
        self, plane: str, inner: str, call: _Call, status: int, body: bytes, duration: float
    ) -> None:
        answer = _peek(body) if body else {}
        code, message = _error_of(answer) if status >= 400 else (None, None)
        own_wire = plane in self._routes
        verb, code, call_id = self._identify(plane, inner, call.record, code)
        outcome = "ok" if status < 400 else (code or f"http_{status}")
        reason = message if status == 401 else None
        if reason is None and status == 401 and own_wire:
            reason = "api key missing or wrong"  # VMP's 401 has no body: one check
        result = answer.get("result") if status == 200 else None
        replayed = isinstance(result, dict) and result.get("replayed") is True
        fields: dict[str, Any] = {
            "plane": plane,
            "verb": verb,
            "status": status,
            "code": outcome if status >= 400 else None,
            "duration_ms": round(duration * 1000, 1),
            "call_id": call_id,
        }
        if reason is not None:
            fields["reason"] = reason
        _emit(call.line, fields, duration, plane if own_wire else "request")
        if self._metrics is not None:
            self._metrics.observe(
                plane,
                verb,
                status,
                outcome,
                duration,
                token_replayed=reason == "token replayed",
                replayed=replayed,
            )

    def _identify(
        self, plane: str, inner: str, record: CallRecord | None, code: str | None
    ) -> tuple[str, str | None, str | None]:
        """A call's verb label, error code and loggable call id: a route template of a
        plane with its own wire (no call id), else the verb bifrost reported."""
        routes = self._routes.get(plane)
        if routes is not None:
            return (inner if inner in routes else "other"), code, None
        if record is None:
            return "other", code, None
        # bifrost reports the verb as safe_name() renders it: quoted.
        named = "handshake" if record.route == "handshake" else record.verb
        named = named.strip("'") if named is not None else None
        verb = str(named) if named in self._verbs.get(plane, ()) else "other"
        return verb, record.error_code or code, loggable_id(record.call_id)


def _emit(
    line: logging.LogRecord | None, fields: dict[str, Any], duration: float, kind: str
) -> None:
    """Log the call's one line with its ``fields``: bifrost's held line when there is
    one, else ``<kind> call plane=… verb=… …``."""
    reason = fields.get("reason")
    if line is not None:
        # One duration per line: bifrost's own (measured inside the app) gives way
        # to the middleware's, the one the fields and the metrics carry.
        held = _args(line.args)
        if isinstance(line.msg, str) and line.msg.endswith("duration_ms=%.1f") and held:
            line.args = (*held[:-1], duration * 1000)
        if reason is not None:
            line.msg = f"{line.msg} reason=%s"
            line.args = (*_args(line.args), reason)
        setattr(line, CALL_FIELDS, fields)
        logging.getLogger(line.name).handle(line)
        return
    template = "%s call plane=%s verb=%s status=%d code=%s duration_ms=%.1f"
    args: tuple[Any, ...] = (
        kind,
        fields["plane"],
        fields["verb"],
        fields["status"],
        fields["code"],
        duration * 1000,
    )
    if reason is not None:
        template += " reason=%s"
        args += (reason,)
    _log.info(template, *args, extra={CALL_FIELDS: fields})


def _args(args: Any) -> tuple[Any, ...]:
    return tuple(args) if isinstance(args, tuple) else ((args,) if args is not None else ())


def _content_length(message: Message) -> int | None:
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def known_routes(app: Any) -> list[str]:
    """The route templates of a Starlette app (VMP's), for the ``verb`` label."""
    return [
        path
        for route in getattr(app, "routes", ())
        if isinstance(path := getattr(route, "path", None), str)
    ]
