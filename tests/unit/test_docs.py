"""The README is a front page and the manual lives in docs/: every relative link between them leads
to a file that exists (and to a heading that exists, where it names one); the README stays short and
gives the two commands a newcomer runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", page.read_text(), re.M)}


def test_every_link_between_the_pages_works():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_manual_has_its_pages_and_the_readme_links_each():
    readme = (ROOT / "README.md").read_text()
    for name in ("rebalancing", "replication", "restoring", "unattended", "configuration", "development"):
        assert (ROOT / "docs" / f"{name}.md").exists()
        assert f"(docs/{name}.md)" in readme


def test_the_readme_is_a_front_page_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 10 * 1024
    head = text[: text.index("## Commands")]
    assert "bash scripts/demo.sh\n" in head and "bash scripts/test.sh\n" in head


def test_the_layout_names_every_module():
    """docs/development.md's layout says what each module owns: a new module goes there too."""
    layout = (ROOT / "docs" / "development.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "rebal").rglob("*.py"))
               if p.name != "__init__.py" and not re.search(rf"\b{re.escape(p.name)}\b", layout)]
    assert missing == []
