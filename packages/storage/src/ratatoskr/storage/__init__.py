"""What every storage backend of ratatoskr shares whatever its engine.

``ratatoskr.sqlite`` and ``ratatoskr.postgres`` both raise these errors (each
maps its driver's exceptions onto them), so a plane, the provider or an operator
handles a full disk or a schema mismatch alike on either backend, by one class.
"""

from ratatoskr.storage import errors
from ratatoskr.storage.errors import *  # noqa: F403  (its __all__, re-exported below)

__all__: list[str] = []
__all__ += errors.__all__
