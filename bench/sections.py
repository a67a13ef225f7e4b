"""Rewrite one benchmark's section of a shared results file, leaving every other byte as it was."""

from __future__ import annotations

import re
from pathlib import Path


def write_section(path: Path, text: str) -> None:
    """Replace the section that starts with `text`'s first line (a Markdown heading) up to the next heading of
    the same or a higher level, or append it when the file has none. The file's title (`# `, the overhead
    benchmark's section) ends at the first `## `: the other benchmarks' sections are its siblings."""
    heading = text.split("\n", 1)[0]
    level = len(heading) - len(heading.lstrip("#"))
    if not level or heading[level:level + 1] != " ":
        raise ValueError(f"a section must start with a Markdown heading, not {heading!r}")
    old = path.read_text() if path.exists() else ""
    start = 0 if old.startswith(heading + "\n") else old.find("\n" + heading + "\n") + 1
    if start == 0 and not old.startswith(heading + "\n"):
        path.write_text(old.rstrip("\n") + "\n\n" + text if old else text)
        return
    nxt = re.compile(rf"^#{{1,{max(level, 2)}}} ", re.M).search(old, start + len(heading) + 1)
    path.write_text(old[:start] + text + ("\n" + old[nxt.start():] if nxt else ""))
