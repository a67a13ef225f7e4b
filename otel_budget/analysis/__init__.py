"""Learning from finished runs: `otel-budget recommend`, `report`, `compare`, `diff` and `evals`."""

from __future__ import annotations

from .compare import compare, format_compare
from .diff import diff, format_diff
from .evals import cases, write_cases
from .recommend import budget_text, format_recommendation, percentile, recommend, suggest_cap
from .records import RunRecord, TurnRecord, records_from_jaeger, records_from_otlp
from .report import format_report, report
from .sources import Loaded, read_file, read_jaeger

__all__ = [
    "Loaded",
    "RunRecord",
    "TurnRecord",
    "budget_text",
    "cases",
    "compare",
    "diff",
    "format_compare",
    "format_diff",
    "format_recommendation",
    "format_report",
    "percentile",
    "read_file",
    "read_jaeger",
    "recommend",
    "records_from_jaeger",
    "records_from_otlp",
    "report",
    "suggest_cap",
    "write_cases",
]
