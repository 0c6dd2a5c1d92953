"""Write docs/settings.md from the provider's settings: one row per ``Field``, its
environment variable, its default and its ``description``, in declaration order.

    .venv/bin/python tools/settings_doc.py          # rewrite docs/settings.md
    .venv/bin/python tools/settings_doc.py --check  # exit 1 when it differs

The descriptions are the single source: ``tests/test_settings_doc.py`` fails when the
page and the code disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ratatoskr.provider.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "settings.md"
COMMAND = ".venv/bin/python tools/settings_doc.py"

HEADER = f"""# Settings

Every setting of `ratatoskr serve` (and of every other `ratatoskr` command) is an
environment variable with the prefix `RATATOSKR_`, read by one pydantic-settings model
(`packages/provider/src/ratatoskr/provider/settings.py`). A variable with the prefix
that is no setting stops the start with a line naming the closest one. Keys
(`HEIMDALL_KEY`, `VMP_API_KEY`, `METRICS_TOKEN`) are secrets: never logged or echoed.

This page is generated from the fields' descriptions by `{COMMAND}`;
a test fails when it and the code differ.

| setting | default | meaning |
|---|---|---|
"""


def default_text(field: FieldInfo) -> str:
    """How a field's default reads in the table."""
    value = field.default
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def cell(text: str) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    """The whole page, as the code says it."""
    rows = [
        f"| `RATATOSKR_{name.upper()}` | {default_text(field)} | {cell(field.description or '')} |"
        for name, field in Settings.model_fields.items()
    ]
    return HEADER + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"docs/settings.md is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
