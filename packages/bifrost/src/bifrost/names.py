"""Naming what a caller got wrong without echoing content: a name is shown only when it
looks like a schema identifier, and a mistyped one gets the closest allowed name."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

__all__ = ["closest", "one_of", "safe_name"]

_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def safe_name(name: object) -> str:
    """Echo an argument/verb/axis name only when it looks like a schema identifier."""
    return repr(name) if isinstance(name, str) and _NAME.fullmatch(name) else "(unprintable)"


def closest(name: object, allowed: Iterable[str]) -> str | None:
    """The allowed name ``name`` is most likely a typo of (difflib), or None; never
    for a name that is no identifier (it could be content)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return None
    found = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    return found[0] if found else None


def one_of(name: object, allowed: Iterable[str]) -> str:
    """``"; allowed: a, b, c"`` plus ``"; did you mean 'b'?"`` when one is close."""
    names = list(allowed)
    hint = closest(name, names)
    return f"; allowed: {', '.join(names)}" + (f"; did you mean {hint!r}?" if hint else "")
