"""deploy/README.md: its links to files exist, and its links into the main README name real sections."""

from __future__ import annotations

import re

from tests.support.deploy import DEPLOY, REPO


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_resolve():
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    anchors_in = {}
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = (DEPLOY / path).resolve() if path else DEPLOY / "README.md"
        assert target.exists(), f"{link}: no such file"
        if anchor:
            if target not in anchors_in:
                headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
                anchors_in[target] = {_anchor(h) for h in headings}
            assert anchor in anchors_in[target], f"{link}: no such section in {target.relative_to(REPO)}"
    main = (REPO / "README.md").resolve()
    assert {"the-daemon", "running-it-against-your-primary", "after-err-1236"} <= anchors_in.get(main, set())
