"""The `otel-budget` command: `demo`, `recommend` (caps from data) and `report` (runs by stop reason)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .analysis.sources import Loaded


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otel-budget", description="A meter and a brake for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the offline demo (ScriptedLLM, no API key needed)", add_help=False)
    demo.add_argument("args", nargs=argparse.REMAINDER)
    for name, text in (
        ("recommend", "suggest a Budget per run name: 2.5 x p95 of the runs that ended done"),
        ("report", "summarize finished runs by stop reason, with cost"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        source = cmd.add_mutually_exclusive_group(required=True)
        source.add_argument("file", nargs="?", help="OTLP/JSON lines (otel_budget.FileSpanExporter, or the "
                            "Collector's file exporter); '-' reads stdin")
        source.add_argument("--jaeger", metavar="URL", help="Jaeger query API base URL, e.g. http://localhost:16686")
        cmd.add_argument("--service", help="Jaeger service name (default: every service)")
        cmd.add_argument("--limit", type=int, default=1000, help="traces per Jaeger service (default 1000)")
        cmd.add_argument("--lookback", help="Jaeger lookback, e.g. 24h or 7d")
        cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
        bar = cmd.add_mutually_exclusive_group()
        bar.add_argument("--progress", dest="progress", action="store_const", const=True, default=None,
                         help="always show a progress bar on stderr (default: only for large inputs)")
        bar.add_argument("--no-progress", dest="progress", action="store_const", const=False)
    return parser


def _load(args: argparse.Namespace) -> Loaded:
    from .analysis.sources import read_file, read_jaeger

    if args.jaeger:
        return read_jaeger(args.jaeger, service=args.service, limit=args.limit, lookback=args.lookback,
                           progress=args.progress)
    return read_file(args.file, progress=args.progress)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `otel-budget` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        from . import demo  # written separately; imported only when asked for

        return int(demo.main(argv[1:]) or 0)
    args = _parser().parse_args(argv)
    try:
        loaded = _load(args)
    except OSError as exc:
        print(f"otel-budget {args.command}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"otel-budget {args.command}: the answer was not JSON ({exc})", file=sys.stderr)
        return 2
    if loaded.bad_lines:
        print(f"otel-budget: {loaded.bad_lines} of {loaded.lines} inputs could not be read (see above); "
              f"{len(loaded.runs)} runs counted from the rest.", file=sys.stderr)
    result: dict[str, Any]
    if args.command == "recommend":
        from .analysis.recommend import format_recommendation, recommend

        result = recommend(loaded.runs)
        text = format_recommendation(result)
    else:
        from .analysis.report import format_report, report

        result = report(loaded.runs)
        text = format_report(result)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
