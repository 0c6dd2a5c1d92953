"""The conformance kit (pytest): subclass the kit classes in a store's test
module and provide a ``make_store`` fixture; see :mod:`.memory` and
:mod:`.affect` for the fixture contracts. ``run_parity`` drives two stores
through the same envelopes via the transport-free dispatch."""

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

__all__ = [
    "SCORE_TOLERANCE",
    "AffectStoreConformance",
    "AffectStoreFactory",
    "ManualClock",
    "MemoryStoreConformance",
    "MemoryStoreFactory",
    "assert_wire_equal",
    "outcome",
    "run_parity",
]
