"""The conformance kit (pytest): subclass the kit classes in a store's test
module and provide a ``make_store`` fixture; see :mod:`.memory` and
:mod:`.affect` for the fixture contracts. ``run_parity`` drives two stores
through the same envelopes via the transport-free dispatch; ``memory_workload`` and
``run_affect_parity`` are the random sequences every backend's parity test runs."""

from bifrost.consumer.testing.conformance._helpers import ManualClock
from bifrost.consumer.testing.conformance.affect import (
    AffectStoreConformance,
    AffectStoreFactory,
)
from bifrost.consumer.testing.conformance.memory import MemoryStoreConformance
from bifrost.consumer.testing.conformance.memory_base import MemoryStoreFactory
from bifrost.consumer.testing.conformance.parity import (
    SCORE_TOLERANCE,
    assert_wire_equal,
    outcome,
    run_parity,
)
from bifrost.consumer.testing.conformance.workloads import (
    AFFECT_KEYS,
    MEMORY_DIM,
    affect_envelope,
    memory_workload,
    run_affect_parity,
)

__all__ = [
    "AFFECT_KEYS",
    "MEMORY_DIM",
    "SCORE_TOLERANCE",
    "AffectStoreConformance",
    "AffectStoreFactory",
    "ManualClock",
    "MemoryStoreConformance",
    "MemoryStoreFactory",
    "affect_envelope",
    "assert_wire_equal",
    "memory_workload",
    "outcome",
    "run_affect_parity",
    "run_parity",
]
