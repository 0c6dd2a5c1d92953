"""Each plane of the Bifrost wire, described once, as data.

A :class:`PlaneSpec` says everything the plane-generic code needs of a plane:
its name (the ``bifrost.plane`` claim, the route ``/bifrost/<name>-call``, the
prefix of its error codes), its verb table, the store protocol its app checks
and its handshake; its dispatch and the argument names its records are
addressed by follow from the verb table. The registration, the app builder, the
client and the parity runner read :data:`PLANE_SPECS` and nothing else; adding a
plane is one entry here (plus its protocol, validation and verb table). See
README.md, "Adding a plane"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from bifrost.affect.dispatch import AFFECT_VERB_SPECS, affect_handshake
from bifrost.affect.protocol import AffectDataStore
from bifrost.context import DispatchContext
from bifrost.dispatch import VerbSpec, dispatch_verb
from bifrost.envelope import Envelope
from bifrost.memory.capabilities import GATED_VERB_CAPABILITY
from bifrost.memory.dispatch import MEMORY_VERB_SPECS, memory_handshake
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

    ``verbs``: the verb table (argument names and handler of each verb; it must
    have ``get`` and ``get_many``, each taking one argument, and one verb taking
    ``records``: the batch write);
    ``protocol``: the runtime-checkable store protocol its app requires;
    ``handshake``: its transport-free handshake;
    ``gated_verbs``: verbs the wire names but this library answers with
    ``<plane>.unsupported_verb``, each with the capability that would advertise it.
    """

    name: str
    verbs: Mapping[str, VerbSpec]
    protocol: type[Any]
    handshake: PlaneDispatch
    gated_verbs: Mapping[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for verb in ("get", "get_many"):
            if verb not in self.verbs or len(self.verbs[verb].required) != 1:
                raise ValueError(f"the {self.name} plane's {verb} must take one argument")
        if len([v for v, spec in self.verbs.items() if "records" in spec.required]) != 1:
            raise ValueError(f"the {self.name} plane must have one verb taking records")

    def dispatch(
        self, store: Any, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
    ) -> Any:
        """Its transport-free dispatch of one envelope (:func:`bifrost.dispatch.dispatch_verb`
        through :attr:`verbs`, the :attr:`gated_verbs` answered unsupported); raises
        what that raises."""
        return dispatch_verb(store, envelope, ctx, self.verbs, unsupported=self.gated_verbs)

    @property
    def route(self) -> str:
        """The path its calls are posted to (the handshake has ``/bifrost/handshake``)."""
        return f"/bifrost/{self.name}-call"

    @property
    def verb_names(self) -> tuple[str, ...]:
        """Its verbs in the order the handshake lists them."""
        return tuple(self.verbs)

    @property
    def id_arg(self) -> str:
        """The argument naming one record (``get``'s)."""
        return next(iter(self.verbs["get"].required))

    @property
    def ids_arg(self) -> str:
        """The argument naming a list of records (``get_many``'s, ``delete_many``'s)."""
        return next(iter(self.verbs["get_many"].required))

    @property
    def write_verb(self) -> str:
        """Its batch write: the verb taking ``records``."""
        return next(v for v, spec in self.verbs.items() if "records" in spec.required)


MEMORY_PLANE: PlaneSpec[MemoryDataStore] = PlaneSpec(
    name="memory",
    verbs=MEMORY_VERB_SPECS,
    protocol=MemoryDataStore,
    handshake=memory_handshake,
    gated_verbs=GATED_VERB_CAPABILITY,
)

AFFECT_PLANE: PlaneSpec[AffectDataStore] = PlaneSpec(
    name="affect",
    verbs=AFFECT_VERB_SPECS,
    protocol=AffectDataStore,
    handshake=affect_handshake,
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
