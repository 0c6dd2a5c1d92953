"""docs/settings.md is what the provider's settings say: every field, its default and
its ``Field(description=…)``, as ``tools/settings_doc.py`` writes them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from ratatoskr.provider.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "settings_doc", ROOT / "tools" / "settings_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("settings_doc", module)
    spec.loader.exec_module(module)
    return module


def test_docs_settings_is_generated_from_the_code() -> None:
    gen = _generator()
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == gen.render(), f"docs/settings.md is out of date: run {gen.COMMAND}"


def test_every_field_has_a_row_with_its_description() -> None:
    gen = _generator()
    page = gen.render()
    for name, field in Settings.model_fields.items():
        assert field.description, name
        row = f"| `RATATOSKR_{name.upper()}` | {gen.default_text(field)} | "
        assert row + gen.cell(field.description) + " |" in page, name


def test_a_changed_description_is_caught() -> None:
    gen = _generator()
    field = Settings.model_fields["port"]
    before = gen.render()
    original = field.description
    try:
        field.description = "TCP port, said differently."
        assert gen.render() != before
    finally:
        field.description = original
    assert gen.render() == before
