"""The options an affect store is opened with are bifrost's ``AffectOptions``
(``bifrost.affect.options``), taken as ``**options``: the SQLite store keeps their
defaults and refuses what an explicit signature refused, before the file is made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bifrost.affect.protocol import affect_health
from bifrost.affect.validation import DEFAULT_MAX_BATCH
from bifrost.limits import InvalidLimits
from bifrost.quota import NO_QUOTA
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY
from ratatoskr.affect import open_affect_store


def test_a_misspelt_option_is_refused_before_the_file_is_made(tmp_path: Path) -> None:
    # The options are bifrost's AffectOptions taken as **options: a misspelt one is
    # still the TypeError of an explicit signature, and nothing is made.
    path = tmp_path / "a.db"
    misspelt: dict[str, Any] = {"max_pages": 7}
    with pytest.raises(TypeError, match="'max_pages'"):
        open_affect_store(str(path), **misspelt)
    assert not path.exists()
    with pytest.raises(InvalidLimits, match="must be positive"):
        open_affect_store(str(path), max_batch=0)
    assert not path.exists()
    store = open_affect_store(str(path), max_page=7)
    assert store.health() == affect_health(max_batch=DEFAULT_MAX_BATCH, max_page=7)
    assert store.max_scope_any == DEFAULT_MAX_SCOPE_ANY and store.quota is NO_QUOTA
    store.close()
