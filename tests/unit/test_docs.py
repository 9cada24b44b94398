"""The README stays a few screens long, and its links and the docs/ pages' links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(page: Path):
    links = relative_links(page)
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
        elif anchor and (target.suffix != ".md" or anchor not in anchors(target)):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in relative_links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked, "docs/ pages the README does not link: " + ", ".join(
        p.name for p in PAGES[1:] if p not in linked
    )


def test_the_readme_fits_on_a_few_screens():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 220, f"README.md has {lines} lines; move detail to a docs/ page and link it"
