"""convert report: renders a JSON report to each format asked for, or prints it; a bad report file exits 2."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


def test_report_renders_every_format_from_the_json(rejected_gate_report, tmp_path):
    paths = {fmt: tmp_path / "rendered" / f"report.{fmt}" for fmt in ("html", "md", "xml")}
    done = run_cli(
        "report", str(rejected_gate_report), "--html", str(paths["html"]), "--markdown", str(paths["md"]), "--junit", str(paths["xml"])
    )
    assert done.returncode == 0, done.output
    assert paths["html"].read_text().startswith("<!DOCTYPE html>") and 'id="verdict"' in paths["html"].read_text()
    assert paths["md"].read_text().startswith("## ❌ REJECT")
    assert paths["xml"].read_text().startswith("<?xml") and "<testsuites" in paths["xml"].read_text()
    assert all(f"wrote {path}" in done.stdout for path in paths.values())


def test_report_without_a_format_prints_the_summary_and_the_verdict(rejected_gate_report):
    done = run_cli("report", str(rejected_gate_report))
    assert done.returncode == 0, done.output
    assert "Validation against the source model" in done.stdout and "Gate: REJECT (exit code 1)" in done.stdout
    assert "[missing_artifact] trt" in done.stdout


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "does not exist"),
        ("[1, 2", "is not JSON"),
        ('{"schema_version": "2.0"}', "does not match the report schema"),
        ('{"schema_version": "1.2"}', "Re-run that model"),
    ],
)
def test_a_bad_report_file_exits_2(tmp_path, content, expected):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    done = run_cli("report", str(path), "--html", str(tmp_path / "report.html"))
    assert done.returncode == 2, done.output
    assert expected in " ".join(done.stderr.split()) and "Traceback" not in done.output
    assert not (tmp_path / "report.html").exists()
