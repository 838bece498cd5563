"""The versioned JSON report (the source of truth) and what is rendered from it."""

from convert.reports.model import SCHEMA_VERSION, Report

__all__ = ["SCHEMA_VERSION", "Report"]
