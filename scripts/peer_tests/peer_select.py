"""pytest plugin (`-p peer_select`), loaded in every pass: which of a peer's tests can run here.

Stainless SDK suites (openai, anthropic) test `tests/api_resources` mostly against their own mock server (Prism
on 127.0.0.1:4010), which is not available here; only the tests there that mock HTTP with respx are kept.
"""

from __future__ import annotations

import pytest

_MOCK_SERVER_TESTS = "tests/api_resources/"


def _needs_mock_server(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    if not path.startswith(_MOCK_SERVER_TESTS):
        return False
    return not any(name.startswith("respx") for name in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselected = [item for item in items if _needs_mock_server(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not _needs_mock_server(item)]
