"""Which calls a plane app answers on its event loop, without the hand-off to a worker
thread and back.

Handing a call to the pool costs two thread wake-ups (the loop wakes a pool thread,
the thread wakes the loop), each a context switch on a busy host: about a fifth of a
one-tenant search's server CPU under load (benchmarks/README.md, "The wire at its
floor"). A call skips it only when nothing can make the loop wait or run long on it:

- its verb is one of the app's ``loop_verbs`` (reads, given only for stores and token
  caches that never wait on a network: the provider gives them to file-backed planes);
- its body is small (at most :data:`LOOP_BODY_BYTES`), its envelope parses and the call
  is not heavy (no large ``top_k``/``limit``/id list);
- no call of this app is in the pool: a write or a long call in flight may hold the
  store's locks, so while one is, every call goes to the pool as before, and a small
  call of another tenant is answered beside the long one, never behind it;
- its *kind* was seen to be cheap: the last time a call of the same verb, grant and
  arguments other than lists and strings (the scope, filter, ``top_k``, what to
  include; not the query vector or the ids) ran in the pool and succeeded, it used less
  than :data:`CHEAP_CPU_S` of CPU and :data:`CHEAP_WALL_S` of time. A kind is unknown,
  so handed off, until then; a call of it on the loop that takes longer than
  :data:`SLOW_LOOP_S` sends the kind back to the pool until a pool run is cheap again.
  So a large tenant's or an unfiltered search is never first tried on the loop, and a
  kind that grew costly stalls the loop at most once before it is handed off again.

One :class:`LoopCalls` per plane app; it is touched only from the app's event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

__all__ = [
    "CHEAP_CPU_S",
    "CHEAP_WALL_S",
    "LOOP_BODY_BYTES",
    "MAX_KINDS",
    "SLOW_LOOP_S",
    "Kind",
    "LoopCalls",
    "call_kind",
]

LOOP_BODY_BYTES = 16 * 1024
CHEAP_CPU_S = 0.001
CHEAP_WALL_S = 0.005
SLOW_LOOP_S = 0.002
# Cheap kinds remembered (least recently used forgotten first): a few hundred bytes each.
MAX_KINDS = 4096

Kind = tuple[str, tuple[tuple[str, str], ...], bytes]


def call_kind(verb: str, grant: Mapping[str, str], args: Mapping[str, Any]) -> Kind | None:
    """The kind of a call: its verb, its grant, and its arguments other than lists and
    strings (sorted JSON); None when those cannot be rendered (never on the loop)."""
    shape = {k: v for k, v in args.items() if not isinstance(v, list | str)}
    try:
        rendered = orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits, say
        return None
    return verb, tuple(sorted(grant.items())), rendered


class LoopCalls:
    """The loop-or-pool decision of one plane app (see the module docstring)."""

    def __init__(self, verbs: Iterable[str] = (), *, max_kinds: int = MAX_KINDS) -> None:
        self.verbs = frozenset(verbs)
        self.in_pool = 0  # calls of this app handed to the pool and not yet back
        self._cheap: OrderedDict[Kind, None] = OrderedDict()
        self._max_kinds = max_kinds

    def candidate(self, verb: str, body_bytes: int) -> bool:
        """Whether a call may be considered at all (before its envelope is parsed)."""
        return verb in self.verbs and body_bytes <= LOOP_BODY_BYTES

    def on_loop(self, kind: Kind) -> bool:
        """Whether a call of ``kind`` runs on the loop now."""
        if self.in_pool or kind not in self._cheap:
            return False
        self._cheap.move_to_end(kind)
        return True

    def ran_in_pool(self, kind: Kind, cpu_s: float, wall_s: float) -> None:
        """A call of ``kind`` succeeded in the pool using ``cpu_s`` of its thread's CPU
        and ``wall_s`` of time."""
        if cpu_s < CHEAP_CPU_S and wall_s < CHEAP_WALL_S:
            self._cheap[kind] = None
            self._cheap.move_to_end(kind)
            if len(self._cheap) > self._max_kinds:
                self._cheap.popitem(last=False)
        else:
            self._cheap.pop(kind, None)

    def ran_on_loop(self, kind: Kind, wall_s: float) -> None:
        """A call of ``kind`` took ``wall_s`` on the loop (answered or refused)."""
        if wall_s > SLOW_LOOP_S:
            self._cheap.pop(kind, None)

    def __len__(self) -> int:
        """Kinds known to be cheap."""
        return len(self._cheap)
