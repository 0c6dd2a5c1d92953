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
- no call of this app that may write or run long is in the pool (a write, a heavy
  call, a call of a kind not known to be cheap): one in flight may hold the store's
  locks, so while one is, every call goes to the pool as before, and a small call of
  another tenant is answered beside the long one, never behind it. The calls of cheap
  kinds sent to the pool meanwhile do not count (else, under load, one long call would
  keep every later call in the pool long after it ended);
- its *kind* was seen to be cheap: the last time a call of the same verb, grant and
  arguments other than lists and strings (the scope, filter, ``top_k``, what to
  include; not the query vector or the ids) ran in the pool and succeeded, its thread
  used less than :data:`CHEAP_CPU_S` of CPU. A kind is unknown, so handed off, until
  then. A call of it on the loop that uses more CPU than that, or takes longer than
  :data:`SLOW_LOOP_S` (it waited: a lock, the disk), sends the kind back to the pool; a
  kind sent back for its time needs a pool run that was quick as well (less than
  :data:`SLOW_LOOP_S`) before it runs on the loop again. So a large tenant's or an
  unfiltered search is never first tried on the loop, and a kind that grew costly
  stalls the loop at most once before it is handed off again.

Why these bounds: a call that runs in a pool thread holds the interpreter while it
computes, up to the switch interval (5 ms) before the loop may take it back; a call
of at most :data:`CHEAP_CPU_S` of CPU on the loop holds it no longer. The wall time of
a pool run is no guide (under load it is mostly the wait for the interpreter).

One :class:`LoopCalls` per plane app; it is touched only from the app's event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

__all__ = [
    "CHEAP_CPU_S",
    "LOOP_BODY_BYTES",
    "MAX_KINDS",
    "SLOW_LOOP_S",
    "Kind",
    "LoopCalls",
    "call_kind",
]

LOOP_BODY_BYTES = 16 * 1024
CHEAP_CPU_S = 0.002
# Four switch intervals: longer is a wait (a lock, the disk), not the interpreter; on a
# loaded host a loop run is also descheduled for 10-20 ms now and then (measured).
SLOW_LOOP_S = 0.020
# Cheap kinds, and kinds sent back for their time, remembered (least recently used
# forgotten first): a few hundred bytes each.
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
        # Calls of this app in the pool that may write or run long (not of a cheap kind).
        self.risky_in_pool = 0
        self._cheap: OrderedDict[Kind, None] = OrderedDict()
        self._waited: OrderedDict[Kind, None] = OrderedDict()  # sent back for their time
        self._max_kinds = max_kinds

    def candidate(self, verb: str, body_bytes: int) -> bool:
        """Whether a call may be considered at all (before its envelope is parsed)."""
        return verb in self.verbs and body_bytes <= LOOP_BODY_BYTES

    def on_loop(self, kind: Kind) -> bool:
        """Whether a call of ``kind`` runs on the loop now."""
        if self.risky_in_pool or kind not in self._cheap:
            return False
        self._cheap.move_to_end(kind)
        return True

    def hand_off(self, kind: Kind | None) -> bool:
        """A call of ``kind`` (None: not a read that may run on the loop) goes to the
        pool; True when it counts as risky until :meth:`back` is called with it."""
        risky = kind is None or kind not in self._cheap
        if risky:
            self.risky_in_pool += 1
        return risky

    def back(self, risky: bool) -> None:
        """A call handed off is back from the pool (``risky``: what :meth:`hand_off` said)."""
        if risky:
            self.risky_in_pool -= 1

    def ran_in_pool(self, kind: Kind, cpu_s: float, wall_s: float) -> None:
        """A call of ``kind`` succeeded in the pool using ``cpu_s`` of its thread's CPU
        and ``wall_s`` of time."""
        if cpu_s >= CHEAP_CPU_S or (wall_s > SLOW_LOOP_S and kind in self._waited):
            self._cheap.pop(kind, None)
            return
        self._waited.pop(kind, None)
        _remember(self._cheap, kind, self._max_kinds)

    def ran_on_loop(self, kind: Kind, cpu_s: float, wall_s: float) -> None:
        """A call of ``kind`` used ``cpu_s`` of CPU and took ``wall_s`` on the loop
        (answered or refused)."""
        if wall_s > SLOW_LOOP_S:
            _remember(self._waited, kind, self._max_kinds)
        if wall_s > SLOW_LOOP_S or cpu_s >= CHEAP_CPU_S:
            self._cheap.pop(kind, None)

    def __len__(self) -> int:
        """Kinds known to be cheap."""
        return len(self._cheap)


def _remember(kinds: OrderedDict[Kind, None], kind: Kind, most: int) -> None:
    """``kind`` into ``kinds`` as the most recent, the oldest forgotten past ``most``."""
    kinds[kind] = None
    kinds.move_to_end(kind)
    if len(kinds) > most:
        kinds.popitem(last=False)
