"""Type-check the README's Python snippets with `mypy --strict`, as a user's checker would see them.

Each ```python block becomes a module. The snippets are fragments of a user's program, so each gets the same
preamble: the imports they use and the user's own names they refer to (a tool list, a client). Bodies written as
`...` are allowed (`--disable-error-code empty-body`): they stand for the user's code.
Usage: python scripts/check_readme_types.py [README.md]
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

PREAMBLE = '''from __future__ import annotations
from typing import Any
import openai
import otel_budget
TOOLS: list[Any] = []  # the user's tool definitions
'''


def main(argv: list[str]) -> int:
    readme = Path(argv[1] if len(argv) > 1 else "README.md")
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.S)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for number, block in enumerate(blocks, 1):
            path = Path(tmp) / f"readme_snippet_{number}.py"
            path.write_text(PREAMBLE + block, encoding="utf-8")
            paths.append(str(path))
        done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                               "--disable-error-code", "empty-body", "--no-error-summary", *paths],
                              capture_output=True, text=True)
    out = done.stdout.replace(tmp + "/", "README ")
    if done.returncode:
        sys.stdout.write(out)
        print(f"{readme}: {len(blocks)} snippets, mypy --strict found errors (snippet numbers count from 1)")
        return 1
    print(f"{readme}: {len(blocks)} snippets pass mypy --strict")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
