"""The shipped documents (README.md, docs/, every package README, benchmarks/README.md)
point only inside the repository, their Python snippets parse, and the README's
figures about workers are those of the benchmark run it cites (issue 27 item 10)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "benchmarks" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "packages").glob("*/README.md"),
    ]
)
IDS = [str(p.relative_to(ROOT)) for p in DOCS]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_SHARED = re.compile(r"(?<![\w.-])shared/[\w./*-]*")
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    broken = []
    for target in _LINK.findall(doc.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same file
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or ROOT not in path.parents:
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_no_mention_of_files_outside_the_repository(doc: Path) -> None:
    mentions = [m for m in _SHARED.findall(doc.read_text()) if not (ROOT / m).exists()]
    assert mentions == []


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_python_snippets_parse(doc: Path) -> None:
    for block in _PYTHON.findall(doc.read_text()):
        ast.parse(block)  # a SyntaxError names the line


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


def test_readme_worker_figures_are_the_cited_runs() -> None:
    operating = (ROOT / "docs" / "operating.md").read_text()
    workers = _section(operating, "### Every core: `--workers N`", "### Starting and stopping")
    bench = (ROOT / "benchmarks" / "README.md").read_text()
    wire = (ROOT / "benchmarks" / "results" / "wire-2026-12-01.md").read_text()
    assert "results/wire-2026-12-01.md" in workers
    one, two = re.search(r"(\d+) → (\d+) one-tenant searches/s at 100k", workers).groups()  # type: ignore[union-attr]
    rss = re.search(r"server RSS (\d+) → (\d+) MB", workers).groups()  # type: ignore[union-attr]
    rows = [line for line in wire.splitlines() if line.startswith("| 100,000 | ratatoskr |")]
    cells = [[c.strip() for c in row.split("|")] for row in rows]
    assert [(c[3], c[5], c[9]) for c in cells] == [("1", one, rss[0]), ("2", two, rss[1])]
    extra = re.search(r"extra worker adds about (\d+) MB", workers).group(1)  # type: ignore[union-attr]
    assert f"+{extra} MB** private" in bench
    single = re.search(r"measured (\d+) searches/s for one\s+process", workers).group(1)  # type: ignore[union-attr]
    assert f"| 100,000 | {single} |" in bench


def test_scores_direction_and_recalled_view_where_a_user_first_meets_them() -> None:
    readme = (ROOT / "README.md").read_text()
    first = _section(readme, "### A call end to end", "## Documentation")
    assert "**1.0 is best**" in first and "**two forms**" in first
    assert "every tenant's" in first  # the default grant
    clients = (ROOT / "docs" / "clients.md").read_text()
    vmp = _section(clients, "<!-- example: python-vmp -->", "## LangChain")
    assert "0.0 is an exact match" in vmp and "lower is better" in vmp


def test_make_run_syncs_without_the_dev_group_and_keeps_what_is_there() -> None:
    makefile = (ROOT / "Makefile").read_text()
    run = re.search(r"^run: (.*)$", makefile, re.M).group(1)  # type: ignore[union-attr]
    assert "bootstrap" not in run
    recipe = _section(makefile, f"{run}:", "\nrun:")
    assert "uv sync --frozen --inexact --no-dev --all-packages" in recipe
