"""The peer suites: which installed distribution, what its tests need, and how to run them here."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Suite:
    """One SDK or framework whose own test suite (from its PyPI sdist) must pass the same with otel-budget on."""

    name: str
    """The distribution on PyPI, as installed in our virtual environment."""
    pins: tuple[str, ...] = ()
    """Other distributions its venv must have at the version installed here (besides itself)."""
    args: tuple[str, ...] = ()
    """Extra pytest arguments (tests that cannot run on this machine are left out here)."""
    serial_marker: str | None = None
    """Tests with this marker need the process alone: run apart, without xdist."""
    env: dict[str, str] = field(default_factory=dict)
    by_contract: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """(test id prefix, reason, passes): tests whose outcome the contract itself changes in those passes;
    reported, not counted."""

    @property
    def requirements(self) -> str:
        return f"requirements-{self.name}.txt"


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            "openai",
            by_contract=(
                ("tests/lib/chat/test_stream_moderation.py::test_stream_moderation[",
                 "the test's mock server sends a usage-only chunk the request never asked for; inside a run we ask "
                 "for include_usage (DESIGN, Streams) and hide that chunk from the caller, since one response cannot "
                 "tell a server that sends usage unasked from one that sends it because we asked",
                 ("run", "money")),
            ),
        ),
        Suite(
            "openai-agents",
            pins=("openai",),
            # Patches os.stat for the whole process and aborts the session.
            args=("--ignore=tests/sandbox/test_docker_removal_worker.py",),
            serial_marker="serial",
        ),
        Suite(
            "anthropic",
            by_contract=(
                *(
                    (path, "the SDK's own OpenTelemetry spans: DESIGN wants exactly one LLM span per call, so ours "
                     "replaces the SDK's (its span_name is cleared), and we call the OpenTelemetry API where the "
                     "SDK's disabled telemetry calls none", ("trace", "run"))
                    for path in ("tests/test_open_telemetry.py::", "tests/lib/tools/test_open_telemetry.py::")
                ),
                *(
                    (test, "the test asserts that no span encloses the SDK's own; inside a run, the run span does "
                     "(DESIGN: calls are children of their run's span)", ("run",))
                    for test in (
                        "tests/test_tracing.py::test_propagation_off_drops_a_span_without_a_valid_context[",
                        "tests/lib/environments/test_poller_method.py::test_work_span_ends_ok_when_the_consumer_stops_polling[",
                        "tests/lib/environments/test_worker.py::test_environment_worker_ends_the_span_ok_when_the_item_is_stopped",
                    )
                ),
            ),
        ),
    )
}
