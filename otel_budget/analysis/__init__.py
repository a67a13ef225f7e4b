"""Learning the caps from finished runs: `otel-budget recommend` and `otel-budget report`."""

from __future__ import annotations

from .recommend import budget_text, format_recommendation, percentile, recommend, suggest_cap
from .records import RunRecord, records_from_jaeger, records_from_otlp
from .report import format_report, report
from .sources import Loaded, read_file, read_jaeger

__all__ = [
    "Loaded",
    "RunRecord",
    "budget_text",
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
]
