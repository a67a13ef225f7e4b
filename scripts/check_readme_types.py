"""Type-check the Python snippets of the README and the docs with `mypy --strict`, as a user's checker would.

Each ```python block becomes a module. The snippets are fragments of a user's program, so each gets the same
preamble: the imports they use and the user's own names they refer to (a tool list). Bodies written as `...` are
allowed (`--disable-error-code empty-body`): they stand for the user's code. A block that includes a file
(`--8<-- "examples/x.py"`) is that file, which `make typecheck` checks as it is. Whether a block also runs in the
test suite is `tests/test_docs_snippets.py`'s business (see `snippets()` below for the marker).
Usage: python scripts/check_readme_types.py [FILE.md ...]   (default: README.md and docs/**/*.md)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PREAMBLE = '''from __future__ import annotations
from typing import Any
import openai
import otel_budget
TOOLS: list[Any] = []  # the user's tool definitions
'''

# A block is run by the test suite unless the line right before its fence says why it cannot run offline:
#     <!-- not run: needs a Redis at ledger:6379 -->
_BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^>]*?) -->\n)?^```python\n(?P<code>.*?)^```", re.S | re.M)
_INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$', re.M)


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # of the opening fence, counted from 1
    code: str
    not_run: str | None  # why it cannot run offline, or None when the test suite runs it
    include: str | None  # the file a block includes instead of code of its own

    @property
    def name(self) -> str:
        return f"{self.path.as_posix()}:{self.line}"


def snippets(path: Path) -> list[Snippet]:
    """Every ```python block of a Markdown file, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code"))  # the fence is the line before the code
        included = _INCLUDE.fullmatch(match["code"].strip())
        found.append(Snippet(path, line, match["code"], match["why"], included[1] if included else None))
    return found


def default_files(root: Path = Path(".")) -> list[Path]:
    """The README and every page of the docs site."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def main(argv: list[str]) -> int:
    files = [Path(arg) for arg in argv[1:]] or default_files()
    blocks = [s for f in files for s in snippets(f) if s.include is None]
    with tempfile.TemporaryDirectory() as tmp:
        paths: dict[str, Snippet] = {}
        for number, block in enumerate(blocks, 1):
            path = Path(tmp) / f"snippet_{number}.py"
            path.write_text(PREAMBLE + block.code, encoding="utf-8")
            paths[str(path)] = block
        done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                               "--disable-error-code", "empty-body", "--no-error-summary", *paths],
                              capture_output=True, text=True)
    out = done.stdout
    offset = PREAMBLE.count("\n")
    for tmp_path, block in paths.items():  # errors point at the Markdown file and its line
        def where(match: re.Match[str], block: Snippet = block) -> str:
            return f"{block.path.as_posix()}:{block.line + int(match[1]) - offset}"
        out = re.sub(re.escape(tmp_path) + r":(\d+)", where, out)
    if done.returncode:
        sys.stdout.write(out)
        print(f"{len(blocks)} snippets in {len(files)} files: mypy --strict found errors")
        return 1
    print(f"{len(blocks)} snippets in {len(files)} files pass mypy --strict")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
