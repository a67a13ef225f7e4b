"""`FileSpanExporter` on hostile paths: a FIFO (which hung the app at exit), a directory, a device; and the
span file's permissions when content capture is on. The healthy case keeps appending whole lines."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import otel_budget
from otel_budget import FileSpanExporter
from otel_budget.core import config


def _write_spans(exporter: FileSpanExporter, names: list[str]) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for name in names:
        tracer.start_span(name).end()
    provider.shutdown()


def _names(path) -> list[str]:
    return [s["name"] for line in path.read_text().splitlines() for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"] for s in ss["spans"]]


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_path_that_is_not_a_regular_file_is_refused_with_a_clear_error(tmp_path, kind):
    path = tmp_path / "spans.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = "/dev/null"
    with pytest.raises(ValueError, match=r"is a (FIFO|directory|device), not a regular file"):
        FileSpanExporter(path)


def test_a_fifo_that_appears_after_setup_never_hangs_the_app_at_exit(tmp_path):
    """The app is its own process: before the fix its exit never came (open() on the FIFO blocked the
    exporter's thread, holding the lock shutdown() waits for)."""
    path = tmp_path / "spans.jsonl"
    script = textwrap.dedent(f"""
        import os
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from otel_budget import FileSpanExporter
        exporter = FileSpanExporter({str(path)!r})
        os.mkfifo({str(path)!r})  # someone put a FIFO there after the app started
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        provider.get_tracer("app").start_span("work").end()
        provider.shutdown()
        print("exited")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "exited", done.stderr
    assert "is a FIFO, not a regular file" in done.stderr  # one warning, naming the path
    assert stat.S_ISFIFO(os.stat(path).st_mode)  # nothing of ours replaced it


@pytest.mark.parametrize("capture", [True, False])
def test_a_new_span_file_is_private_while_content_is_captured(tmp_path, monkeypatch, capture):
    monkeypatch.setattr(config.get(), "capture_content", capture)
    old = os.umask(0o022)
    try:
        path = tmp_path / "spans.jsonl"
        _write_spans(FileSpanExporter(path), ["one"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == (0o600 if capture else 0o644)
    assert _names(path) == ["one"]


def test_an_existing_span_file_is_appended_to_and_keeps_its_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", True)
    path = tmp_path / "spans.jsonl"
    _write_spans(FileSpanExporter(path), ["first"])
    os.chmod(path, 0o640)
    for i in range(200):
        _write_spans(FileSpanExporter(path), [f"run-{i}"])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert _names(path) == ["first"] + [f"run-{i}" for i in range(200)]


def test_instrument_with_capture_content_makes_the_file_private(tmp_path):
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    otel_budget.instrument(tracer_provider=provider, capture_content=True)
    try:
        with otel_budget.run("private"):
            pass
    finally:
        otel_budget.uninstrument()
        provider.shutdown()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert _names(path) == ["invoke_agent private"]
