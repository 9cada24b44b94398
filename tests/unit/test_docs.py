"""The README stays a few screens long, and its links and the docs/ pages' links lead somewhere."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
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
            broken.append(
                f"{link}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}"
            )
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


def tour_commands() -> list[list[str]]:
    """The override lists of the README's "A short tour of overrides" block."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## A short tour of overrides") :]
    block = section[section.index("```bash") + 7 : section.index("```", section.index("```bash") + 7)]
    commands = [shlex.split(line, comments=True) for line in block.strip().splitlines()]
    assert all(c[:2] == ["python", "run_pipeline.py"] for c in commands), commands
    return [[a for a in c[2:] if a != "-m"] for c in commands]


@pytest.mark.parametrize("overrides", tour_commands(), ids=" ".join)
def test_every_override_of_the_readme_tour_composes(overrides: list[str]):
    """Hydra composes each line of the tour (a key or option that no longer exists fails here);
    a sweep composes with its first value."""
    first = [re.sub(r"^([^=']+=)([^,{]+),.*$", r"\1\2", o) for o in overrides]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        compose(config_name="config", overrides=first)
