"""The memory plane surface of the Bifrost wire: the store protocol, its
capabilities, the typed errors stores raise, the shared validators, and
transport-free dispatch.

Built from its homes' lists: every name of :mod:`bifrost.memory.validation` and of
:mod:`bifrost.store_api`, and the plane's protocol, capabilities and dispatch."""

from bifrost import store_api
from bifrost.errors import UnsupportedVerb
from bifrost.memory import validation
from bifrost.memory.capabilities import GATED_VERB_CAPABILITY, StoreCapabilities
from bifrost.memory.dispatch import MEMORY_VERBS, dispatch_memory_call, memory_handshake
from bifrost.memory.protocol import MemoryDataStore
from bifrost.memory.validation import *  # noqa: F403  (its __all__, re-exported below)
from bifrost.store_api import *  # noqa: F403  (its __all__, re-exported below)

__all__ = [
    "GATED_VERB_CAPABILITY",
    "MEMORY_VERBS",
    "MemoryDataStore",
    "StoreCapabilities",
    "UnsupportedVerb",
    "dispatch_memory_call",
    "memory_handshake",
]
__all__ += store_api.__all__
__all__ += validation.__all__
