"""The affect plane surface of the Bifrost wire (a blind conduit): the store
protocol, its capabilities, the typed errors, shared validators and dispatch.

Built from its homes' lists: every name of :mod:`bifrost.affect.validation` and of
:mod:`bifrost.store_api`, and the plane's protocol, capabilities and dispatch."""

from bifrost import store_api
from bifrost.affect import validation
from bifrost.affect.dispatch import AFFECT_VERBS, affect_handshake, dispatch_affect_call
from bifrost.affect.protocol import AFFECT_CAPABILITIES, AffectDataStore
from bifrost.affect.validation import *  # noqa: F403  (its __all__, re-exported below)
from bifrost.store_api import *  # noqa: F403  (its __all__, re-exported below)

__all__ = [
    "AFFECT_CAPABILITIES",
    "AFFECT_VERBS",
    "AffectDataStore",
    "affect_handshake",
    "dispatch_affect_call",
]
__all__ += store_api.__all__
__all__ += validation.__all__
