"""Every adapter is one declaration (`AdapterSpec`) applied by one `apply`: each declared patch point exists and is
patched, `uninstrument()` puts back the very object every point held, and an adapter that cannot patch all it
declares says so once, in the shared words, while the rest of it and the other adapters are patched."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")
pytest.importorskip("langgraph")

import agents  # noqa: E402
import claude_agent_sdk  # noqa: E402, F401
import google.genai  # noqa: E402, F401
import langchain.agents  # noqa: E402, F401
import langchain_core.language_models.chat_models  # noqa: E402, F401
import langgraph.pregel  # noqa: E402, F401
import litellm  # noqa: E402, F401
import opentelemetry.instrumentation.openai.v1  # noqa: E402, F401
import pydantic_ai  # noqa: E402, F401
from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.instrumentation import TRIGGERS, _spec  # noqa: E402
from otel_budget.instrumentation._patch import Patches  # noqa: E402
from otel_budget.instrumentation._spec import AdapterSpec, PatchPoint, apply  # noqa: E402
from otel_budget.instrumentation.frameworks import langchain as langchain_adapter  # noqa: E402
from otel_budget.instrumentation.frameworks import openai_agents as agents_adapter  # noqa: E402
from otel_budget.testing import ScriptedLLM, Turn  # noqa: E402

#: Every adapter module, by the name `instrumented_libraries()` gives it.
ADAPTERS = {module.rpartition(".")[2]: importlib.import_module(f"otel_budget.instrumentation.{module}")
            for module in TRIGGERS}
FRAMEWORKS = ("openai_agents", "langchain", "claude_agent_sdk", "pydantic_ai")


def _held(spec: AdapterSpec) -> Iterator[tuple[Any, str, Any]]:
    """(owner, attribute, what it holds now) for every point of `spec` present here, subclasses' own included."""
    for point in spec.patches:
        found = _spec._owner(point)
        assert found is not None or point.optional, f"{point} is declared but missing from the installed library"
        if found is None:
            continue
        owner, name = found
        yield owner, name, owner.__dict__[name]
        if point.subclasses:
            yield from ((cls, name, cls.__dict__[name]) for cls in _spec._subclasses(owner) if name in cls.__dict__)


def _snapshot() -> dict[str, list[tuple[Any, str, Any]]]:
    return {name: list(_held(adapter.SPEC)) for name, adapter in ADAPTERS.items()}


@pytest.fixture
def clean() -> Iterator[None]:
    otel_budget.uninstrument()
    yield
    otel_budget.uninstrument()


def _cannot(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("otel-budget: cannot fully instrument")]


@pytest.mark.parametrize("openinference_first", [False, True])
def test_uninstrument_restores_every_patched_attribute_of_every_adapter_by_identity(clean: None,
                                                                                  openinference_first: bool) -> None:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    peer = OpenAIInstrumentor()
    if openinference_first:  # it wraps `OpenAI.request`, a subclass's own: ours goes there too
        peer.instrument()
    try:
        _restores_by_identity()
    finally:
        if openinference_first:
            peer.uninstrument()


def _restores_by_identity() -> None:
    before = _snapshot()
    assert all(before[name] for name in ADAPTERS), "an adapter with no patch point present"
    otel_budget.instrument()
    assert sorted(otel_budget.instrumented_libraries()) == sorted(ADAPTERS)
    for name, held in before.items():
        unpatched = [f"{owner.__name__}.{attr}" for owner, attr, original in held if owner.__dict__[attr] is original]
        assert unpatched == [], f"{name}: not patched"
    otel_budget.uninstrument()
    for name, held in before.items():
        changed = [f"{owner.__name__}.{attr}" for owner, attr, original in held if owner.__dict__[attr] is not original]
        assert changed == [], f"{name}: not restored to the very same object"


def test_a_second_apply_of_a_spec_patches_nothing_more(clean: None) -> None:
    patches = Patches()
    try:
        for adapter in ADAPTERS.values():
            apply(adapter.SPEC, patches)
        count = len(patches)
        for adapter in ADAPTERS.values():
            apply(adapter.SPEC, patches)
        assert len(patches) == count
    finally:
        patches.undo()


def test_the_installed_frameworks_are_instrumented_without_a_warning(clean: None,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        otel_budget.instrument()
    assert _cannot(caplog) == []


async def test_a_missing_patch_point_warns_once_in_the_shared_words_and_breaks_nothing_else(
        clean: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
        scripted_llm: ScriptedLLM) -> None:
    spec = agents_adapter.SPEC
    gone = (PatchPoint("agents.run", "AgentRunner.run_later", agents_adapter._runner_run),
            PatchPoint("agents.no_such_module", "Runner.run", agents_adapter._runner_run))
    before = _snapshot()
    monkeypatch.setattr(agents_adapter, "SPEC", dataclasses.replace(spec, patches=(*gone, *spec.patches)))
    with caplog.at_level(logging.WARNING):
        otel_budget.instrument()
    (warning,) = _cannot(caplog)
    version = importlib.metadata.version("openai-agents")
    assert warning == (f"otel-budget: cannot fully instrument openai-agents {version}: it lacks "
                       "agents.run:AgentRunner.run_later and agents.no_such_module:Runner.run, so some of it is not "
                       "budgeted")
    assert sorted(otel_budget.instrumented_libraries()) == sorted(ADAPTERS)
    for name, held in before.items():  # the rest of it, and every other adapter, are patched
        assert all(owner.__dict__[attr] is not original for owner, attr, original in held), name
    # and a run of the framework is budgeted as ever
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    scripted_llm.default = Turn(text="fine")
    result = await Runner.run(Agent(name="partly", model="m", instructions="Help."), "hi",
                              context={"otel_budget": otel_budget.Budget(max_steps=3)})
    done = agents_adapter.outcome(result)
    assert done is not None and done.stop_reason == "done" and done.usage.model_calls == 1


def test_a_version_outside_the_range_warns_once_and_is_patched_all_the_same(
        clean: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = langchain_adapter.SPEC
    monkeypatch.setattr(langchain_adapter, "SPEC", dataclasses.replace(
        spec, requires=("langchain-core >= 0.1, < 0.2", "langgraph >= 0.1, < 0.2")))
    before = _snapshot()["langchain"]
    with caplog.at_level(logging.WARNING):
        otel_budget.instrument()
    (warning,) = _cannot(caplog)
    core, graph = importlib.metadata.version("langchain-core"), importlib.metadata.version("langgraph")
    assert warning == (
        f"otel-budget: cannot fully instrument langchain-core {core}: langchain-core {core} is outside the versions "
        f"supported (<0.2,>=0.1); what it has is patched all the same; langgraph {graph} is outside the versions "
        "supported (<0.2,>=0.1); what it has is patched all the same")
    assert all(owner.__dict__[attr] is not original for owner, attr, original in before)


def test_a_library_that_is_not_installed_is_not_patched_nor_reported(caplog: pytest.LogCaptureFixture) -> None:
    patches = Patches()
    spec = AdapterSpec(requires=("no-such-distribution-here >= 1",),
                       patches=(PatchPoint("agents.run", "AgentRunner.run", agents_adapter._runner_run),))
    with caplog.at_level(logging.DEBUG):
        assert apply(spec, patches) is False
    assert len(patches) == 0 and _cannot(caplog) == []


def test_a_point_in_a_package_that_is_not_installed_is_skipped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    patches = Patches()
    original = agents.run.AgentRunner.__dict__["run"]
    spec = AdapterSpec(requires=("openai-agents",),
                       patches=(PatchPoint("no_such_package_here.sub", "Thing.run", agents_adapter._runner_run),
                                PatchPoint("agents.run", "AgentRunner.run", agents_adapter._runner_run)))
    try:
        with caplog.at_level(logging.WARNING):
            assert apply(spec, patches) is True
        assert _cannot(caplog) == [] and agents.run.AgentRunner.__dict__["run"] is not original
    finally:
        patches.undo()
    assert agents.run.AgentRunner.__dict__["run"] is original


def test_a_point_that_refuses_the_patch_is_reported_and_the_next_one_is_patched(
        caplog: pytest.LogCaptureFixture) -> None:
    patches = Patches()
    original = agents.run.AgentRunner.__dict__["run"]
    spec = AdapterSpec(requires=("openai-agents",),
                       patches=(PatchPoint("builtins", "int.bit_length", agents_adapter._runner_run),  # immutable
                                PatchPoint("agents.run", "AgentRunner.run", agents_adapter._runner_run)))
    try:
        with caplog.at_level(logging.WARNING):
            assert apply(spec, patches) is True
        (warning,) = _cannot(caplog)
        assert "it lacks builtins:int.bit_length, so some of it is not budgeted" in warning
        assert agents.run.AgentRunner.__dict__["run"] is not original
    finally:
        patches.undo()
    assert agents.run.AgentRunner.__dict__["run"] is original


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_each_framework_adapter_is_a_declaration_and_no_instrument_function(name: str) -> None:
    adapter = ADAPTERS[name]
    assert isinstance(adapter.SPEC, AdapterSpec) and adapter.SPEC.requires and adapter.SPEC.patches
    assert not hasattr(adapter, "instrument")


def test_the_examples_in_the_adding_an_integration_page_are_the_real_declarations() -> None:
    import re
    from pathlib import Path

    page = Path(__file__).parents[2] / "docs" / "adding-an-integration.md"
    examples = []
    for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        scope: dict[str, Any] = {}
        exec(block, scope)  # noqa: S102 - our own docs page
        examples.append(scope["SPEC"])
    claude, anthropic = examples
    assert claude == ADAPTERS["claude_agent_sdk"].SPEC
    real = ADAPTERS["anthropic"].SPEC  # its wrappers are made afresh per declaration: compare where they go
    assert anthropic.requires == real.requires
    assert [(p.module, p.attribute, p.subclasses) for p in anthropic.patches] == \
        [(p.module, p.attribute, p.subclasses) for p in real.patches]
