"""The `otel-budget` command: `demo`, and commands that learn from finished runs: `recommend` (caps from data),
`report` (runs by stop reason, with cost; `--html` for a page with plots), `compare` (before and after a change),
`diff` (where the runs of one task diverge) and `evals` (stopped runs as eval cases)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .analysis.sources import Loaded
from .analysis.untrusted import dumps, printable, printable_lines

#: Exit status when nothing could be read, and when `compare` finds a regression.
EXIT_UNREADABLE = 2
EXIT_REGRESSION = 1


def _progress_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
    bar = cmd.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_const", const=True, default=None,
                     help="always show a progress bar on stderr (default: only for large inputs)")
    bar.add_argument("--no-progress", dest="progress", action="store_const", const=False)


def _source(cmd: argparse.ArgumentParser) -> None:
    source = cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("file", nargs="?", help="OTLP/JSON lines (otel_budget.FileSpanExporter, or the "
                        "Collector's file exporter); '-' reads stdin")
    source.add_argument("--jaeger", metavar="URL", help="Jaeger query API base URL, e.g. http://localhost:16686")
    cmd.add_argument("--service", help="Jaeger service name (default: every service)")
    cmd.add_argument("--limit", type=int, default=1000, help="traces per Jaeger service (default 1000)")
    cmd.add_argument("--lookback", help="Jaeger lookback, e.g. 24h or 7d")


def _parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = argparse.ArgumentParser(prog="otel-budget", description="A meter and a brake for LLM agents.")
    parser.add_argument("--version", action="version", version=f"otel-budget {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the offline demo (ScriptedLLM, no API key needed)", add_help=False)
    demo.add_argument("args", nargs=argparse.REMAINDER)
    for name, text in (
        ("recommend", "suggest a Budget per run name: 2.5 x p95 of the runs that ended done"),
        ("report", "summarize finished runs by stop reason, with cost"),
        ("diff", "align the runs of one task turn by turn and show where they diverge"),
        ("evals", "write every run that did not end done as an eval case (JSON lines)"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        _source(cmd)
        _progress_flags(cmd)
        if name == "report":
            cmd.add_argument("--html", metavar="PATH", help="also write a self-contained HTML page with plots")
        elif name == "diff":
            cmd.add_argument("--run-name", required=True, help="the run name (task) whose runs are aligned")
        elif name == "evals":
            cmd.add_argument("-o", "--output", default="-", help="where to write the cases (default: stdout)")
    text = "compare the runs before and after a change; exit 1 if completion fell or the worst-case cost rose"
    cmp = sub.add_parser("compare", help=text, description=text)
    cmp.add_argument("before", help="OTLP/JSON lines of the runs before the change")
    cmp.add_argument("after", help="OTLP/JSON lines of the runs after the change")
    _progress_flags(cmp)
    return parser


def _load(args: argparse.Namespace) -> Loaded:
    from .analysis.sources import read_file, read_jaeger

    if getattr(args, "jaeger", None):
        return read_jaeger(args.jaeger, service=args.service, limit=args.limit, lookback=args.lookback,
                           progress=args.progress)
    return read_file(args.file, progress=args.progress)


def _read(command: str, load: Any) -> Loaded | None:
    """Load one input; None (after saying why on stderr) when nothing in it could be read."""
    try:
        loaded: Loaded = load()
    except OSError as exc:
        print(f"otel-budget {command}: {printable(exc)}", file=sys.stderr)
        return None
    except ValueError as exc:
        print(f"otel-budget {command}: the answer was not JSON ({printable(exc)})", file=sys.stderr)
        return None
    if loaded.bad_lines:
        print(f"otel-budget {command}: {loaded.bad_lines} of {loaded.lines} inputs could not be read (see above); "
              f"{len(loaded.runs)} runs counted from the rest.", file=sys.stderr)
    if not loaded.good_lines:
        print(f"otel-budget {command}: nothing could be read ({loaded.lines} inputs, none of them spans).",
              file=sys.stderr)
        return None
    return loaded


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `otel-budget` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        return _demo(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "compare":
        return _compare(args)
    loaded = _read(args.command, lambda: _load(args))
    if loaded is None:
        return EXIT_UNREADABLE
    result: Any
    if args.command == "recommend":
        from .analysis.recommend import format_recommendation, recommend

        result = recommend(loaded.runs)
        text = format_recommendation(result)
    elif args.command == "diff":
        from .analysis.diff import diff, format_diff

        result = diff(loaded.runs, args.run_name)
        text = format_diff(result)
    elif args.command == "evals":
        return _evals(args, loaded)
    else:
        from .analysis.report import format_report, report

        result = report(loaded.runs)
        text = format_report(result)
        if args.html:
            code = _html(args.html, loaded)
            if code:
                return code
    if args.json:
        print(dumps(result, indent=2))  # always JSON: the figures read are finite (analysis/untrusted.py)
    else:
        sys.stdout.write(printable_lines(text))  # every field is escaped already; this catches any left out
    return 0


def _demo(argv: list[str]) -> int:
    try:
        import openai  # noqa: F401 - the demo drives the real openai SDK

        from .demo import rows as demo  # imported only when asked for
    except ModuleNotFoundError as exc:
        print(f"otel-budget demo needs the {exc.name} package, which is not installed: "
              "pip install 'otel-budget[openai]'", file=sys.stderr)
        return EXIT_UNREADABLE
    return int(demo.main(argv) or 0)


def _compare(args: argparse.Namespace) -> int:
    from .analysis.compare import compare, format_compare, incomplete
    from .analysis.sources import read_file

    before = _read("compare", lambda: read_file(args.before, progress=args.progress))
    after = _read("compare", lambda: read_file(args.after, progress=args.progress))
    if before is None or after is None:
        return EXIT_UNREADABLE
    result = compare(before.runs, after.runs)
    incomplete(result, "before", args.before, before.bad_lines, before.lines)
    incomplete(result, "after", args.after, after.bad_lines, after.lines)
    if args.json:
        print(dumps(result, indent=2))
    else:
        sys.stdout.write(printable_lines(format_compare(result)))
        for warning in result["warnings"]:
            print(f"otel-budget compare: warning: {printable(warning)}", file=sys.stderr)
    return 0 if result["passed"] else EXIT_REGRESSION


def _evals(args: argparse.Namespace, loaded: Loaded) -> int:
    from .analysis.evals import write_cases

    if args.output == "-":
        count = write_cases(loaded.runs, sys.stdout)
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            count = write_cases(loaded.runs, out)
    summary = {"cases": count, "runs": len(loaded.runs), "output": args.output}
    if args.json and args.output != "-":
        print(dumps(summary))
    else:
        print(f"otel-budget evals: {count} eval cases from {len(loaded.runs)} runs -> {printable(args.output)}",
              file=sys.stderr)
    return 0


def _html(path: str, loaded: Loaded) -> int:
    from .analysis.html_report import render

    try:
        page = render(loaded.runs)
    except RuntimeError as exc:
        print(f"otel-budget report: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    with open(path, "w", encoding="utf-8") as out:
        out.write(page)
    print(f"otel-budget report: wrote {printable(path)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
