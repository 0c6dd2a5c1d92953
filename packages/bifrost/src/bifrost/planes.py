"""Each plane of the Bifrost wire, described once, as data.

A :class:`PlaneSpec` says everything the plane-generic code needs of a plane:
its name (the ``bifrost.plane`` claim, the route ``/bifrost/<name>-call``, the
prefix of its error codes), its verb table, the store protocol its app checks,
its dispatch and handshake, and the argument names its records are addressed
by. The registration, the app builder, the client and the parity runner read
:data:`PLANE_SPECS` and nothing else; adding a plane is one entry here (plus its
protocol, validation and verb table). See README.md, "Adding a plane".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from bifrost.affect.dispatch import AFFECT_VERB_SPECS, affect_handshake, dispatch_affect_call
from bifrost.affect.protocol import AffectDataStore
from bifrost.context import DispatchContext
from bifrost.dispatch import VerbSpec
from bifrost.envelope import Envelope
from bifrost.memory.capabilities import GATED_VERB_CAPABILITY
from bifrost.memory.dispatch import MEMORY_VERB_SPECS, dispatch_memory_call, memory_handshake
from bifrost.memory.protocol import MemoryDataStore

__all__ = [
    "AFFECT_PLANE",
    "MEMORY_PLANE",
    "PLANE_SPECS",
    "WIRE_PLANES",
    "PlaneDispatch",
    "PlaneSpec",
    "plane_spec",
]

_S = TypeVar("_S")

PlaneDispatch = Callable[[Any, Envelope | Mapping[str, Any], DispatchContext], Any]
"""``(store, envelope, ctx) -> result``: transport-free dispatch of one envelope."""


@dataclass(frozen=True)
class PlaneSpec(Generic[_S]):
    """One plane of the wire, whose stores are ``_S`` (its ``protocol``).

    ``verbs``: the verb table (argument names and handler of each verb);
    ``protocol``: the runtime-checkable store protocol its app requires;
    ``dispatch`` / ``handshake``: its transport-free dispatch and handshake;
    ``id_arg`` / ``ids_arg``: the argument naming one record / a list of records
    (``get`` / ``get_many`` and ``delete_many``); ``write_verb``: its batch write;
    ``gated_verbs``: verbs the wire names but this library answers with
    ``<plane>.unsupported_verb``, each with the capability that would advertise it.
    """

    name: str
    verbs: Mapping[str, VerbSpec]
    protocol: type[Any]
    dispatch: PlaneDispatch
    handshake: PlaneDispatch
    id_arg: str
    ids_arg: str
    write_verb: str
    gated_verbs: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def route(self) -> str:
        """The path its calls are posted to (the handshake has ``/bifrost/handshake``)."""
        return f"/bifrost/{self.name}-call"

    @property
    def verb_names(self) -> tuple[str, ...]:
        """Its verbs in the order the handshake lists them."""
        return tuple(self.verbs)


MEMORY_PLANE: PlaneSpec[MemoryDataStore] = PlaneSpec(
    name="memory",
    verbs=MEMORY_VERB_SPECS,
    protocol=MemoryDataStore,
    dispatch=dispatch_memory_call,
    handshake=memory_handshake,
    id_arg="chunk_id",
    ids_arg="ids",
    write_verb="upsert_many",
    gated_verbs=GATED_VERB_CAPABILITY,
)

AFFECT_PLANE: PlaneSpec[AffectDataStore] = PlaneSpec(
    name="affect",
    verbs=AFFECT_VERB_SPECS,
    protocol=AffectDataStore,
    dispatch=dispatch_affect_call,
    handshake=affect_handshake,
    id_arg="key",
    ids_arg="keys",
    write_verb="put_many",
)

PLANE_SPECS: Mapping[str, PlaneSpec[Any]] = {
    spec.name: spec for spec in (MEMORY_PLANE, AFFECT_PLANE)
}
"""Every plane of the wire, by name."""

WIRE_PLANES: tuple[str, ...] = tuple(PLANE_SPECS)
"""The names of the planes the Bifrost wire serves (VMP is not one: it has its own wire)."""


def plane_spec(name: object) -> PlaneSpec[Any]:
    """The spec of the plane called ``name``; any other value → ``ValueError``."""
    spec = PLANE_SPECS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"plane must be {' or '.join(WIRE_PLANES)}")
    return spec
