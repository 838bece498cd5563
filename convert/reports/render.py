"""Write the renderings of one JSON report: HTML, Markdown, JUnit XML."""

from __future__ import annotations

import os
from pathlib import Path

from convert.errors import ConvertError
from convert.reports.model import Report


def render_files(report: Report, *, html: Path | None = None, markdown: Path | None = None, junit: Path | None = None) -> list[Path]:
    """Write each rendering asked for and return their paths.

    Markdown is appended to a file that is GitHub's $GITHUB_STEP_SUMMARY (every step of a job appends to it),
    and replaces any other file."""
    check_writable(html, markdown, junit)
    written = []
    if html is not None:
        from convert.reports.html import write_html

        write_html(report, html)
        written.append(html)
    if junit is not None:
        from convert.reports.junit import write_junit

        write_junit(report, junit)
        written.append(junit)
    if markdown is not None:
        from convert.reports.markdown import write_markdown

        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        write_markdown(report, markdown, append=bool(summary) and Path(summary).resolve() == markdown.resolve())
        written.append(markdown)
    return written


def check_writable(*paths: Path | None) -> None:
    """Checked before a long run: a rendering that cannot be written must not cost the run."""
    for path in paths:
        if path is not None and path.is_dir():
            raise ConvertError(f"{path} is a folder, not a file to write the report to", "Name a file, e.g. out/report.html.")
