"""``--dev``: the embedded default that needs no configuration.

Databases under ``./var/``, a development Heimdall key generated once into
``./var/dev-heimdall.key`` (mode 0600), loopback only. Whatever the environment
sets explicitly (a dimension, a path) still wins, except the host: a dev server
never listens beyond this machine.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from ratatoskr.provider.registry import PLANE_TABLE
from ratatoskr.provider.settings import Settings

DEV_DIR = Path("var")
DEV_HOST = "127.0.0.1"  # a dev server never listens beyond this machine
DEV_KEY_FILE = DEV_DIR / "dev-heimdall.key"


def ensure_dev_key(path: Path = DEV_KEY_FILE) -> Path:
    """Create the development key once (0600, never overwritten); return its path."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(48) + "\n")
    return path


def dev_settings(**overrides: Any) -> Settings:
    """Settings for ``--dev``: the environment's values, dev defaults for the rest."""
    base = Settings(**overrides)
    dev: dict[str, Any] = {"host": DEV_HOST}
    if base.heimdall_key is None and base.heimdall_key_file is None:
        dev["heimdall_key_file"] = ensure_dev_key()
    for name, plane in PLANE_TABLE.items():
        if plane.db_field not in base.model_fields_set:
            DEV_DIR.mkdir(mode=0o700, exist_ok=True)
            dev[plane.db_field] = str(DEV_DIR / f"{name}.db")
    return base.model_copy(update=dev)
