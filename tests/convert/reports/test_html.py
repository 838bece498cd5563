"""The HTML report, rendered from a real report.json: self-contained, escaped, complete, and drawn by a real browser.

The browser test runs Debian's headless Chromium (installed by ``make install``) and reads the screenshot's pixels
with a small PNG decoder below (zlib, struct and numpy; no imaging library is a dependency).
"""

from __future__ import annotations

import html
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from convert.reports.html import render_html, write_html
from convert.reports.model import (
    ArtifactRecord,
    Attempt,
    AutoCandidate,
    AutoSelection,
    BaselineComparison,
    BaselineDelta,
    Benchmark,
    BudgetResult,
    Check,
    Environment,
    GateReason,
    Report,
    Stage,
    Verdict,
)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
REJECT_RED = (0xCF, 0x22, 0x2E)
PROMOTE_GREEN = (0x1A, 0x7F, 0x37)
CHART_BLUE = (0x09, 0x69, 0xDA)
SCRIPT_MESSAGE = "cosine 0.97 < 0.98 on output <script>alert('x')</script> & more"
MULTILINE_ERROR = 'Traceback (most recent call last):\n  File "<export>", line 3\nValueError: rank < 2 & dim > 4'


@pytest.fixture(scope="module")
def report(exported_report: Path) -> Report:
    return Report.from_json(exported_report.read_text())


def _with_reject_verdict(report: Report) -> Report:
    """The report with a rejecting gate verdict attached by hand (to be replaced by a real ``convert gate`` run)."""
    verdict = Verdict(
        decision="reject",
        promoted=False,
        exit_code=1,
        policy="policies/release.yaml",
        reasons=[
            GateReason(code="budget", artifact="fp16", message=SCRIPT_MESSAGE),
            GateReason(code="regression", artifact="onnx", message="latency_ms_p50 0.056 ms is 40% above the baseline"),
        ],
        notes=["cuda is absent on this machine: the policy allows skipping it"],
        required_targets=["onnx", "torchscript"],
        required_optimizations=["fp16"],
        required_devices=["cpu"],
        budgets=[
            BudgetResult(
                artifact="fp16",
                kind="accuracy",
                metric="cosine",
                limit=">=0.98",
                value=0.97,
                output="output",
                runtime="onnxruntime",
                device="cpu",
                shape="d0=2",
                status="failed",
                reason="below the limit",
            ),
            BudgetResult(artifact="onnx", kind="size", metric="size_mb", limit="<=5", value=0.033, status="passed"),
        ],
        baseline=BaselineComparison(
            path="baselines/report.json",
            tool_version="0.1.0",
            same_environment=True,
            allowance={"latency_pct": 10},
            deltas=[
                BaselineDelta(
                    artifact="onnx",
                    kind="latency",
                    metric="latency_ms_p50",
                    runtime="onnxruntime",
                    device="cpu",
                    baseline=0.04,
                    current=0.056,
                    delta=0.016,
                    delta_pct=40.0,
                    allowed="+10%",
                    status="regressed",
                ),
                BaselineDelta(
                    artifact="onnx",
                    kind="size",
                    metric="size_bytes",
                    baseline=34000,
                    current=33398,
                    delta=-602,
                    delta_pct=-1.77,
                    allowed="+5%",
                    status="improved",
                ),
            ],
        ),
    )
    return report.model_copy(update={"gate": verdict})


def _failed_run(report: Report) -> Report:
    """A run that failed: a failed stage with a multi-line error, an artifact never exported, auto selection."""
    never_exported = ArtifactRecord(
        format="tensorrt", attempts=[Attempt(strategy="trtexec", status="failed", seconds=0.5, error=MULTILINE_ERROR)]
    )
    failing_check = Check(runtime="onnxruntime", device="cpu", shape="d0=2", status="failed", reason="max |err| 3 > atol <1e-4>")
    broken = report.artifacts[0].model_copy(
        update={
            "passed": False,
            "checks": [failing_check],
            "benchmarks": [Benchmark(runtime="onnxruntime", device="cpu", status="failed", reason="session crashed")],
        }
    )
    auto = AutoSelection(
        chosen=None,
        candidates=[
            AutoCandidate(name="none", format="onnx", status="lost", rank=2, latency_ms_p50=0.06),
            AutoCandidate(name="int8", format="onnx", precision="int8", status="failed", reason="cosine 0.5 < 0.98"),
        ],
    )
    return report.model_copy(
        update={
            "passed": False,
            "exit_code": 1,
            "error": "export to tensorrt failed",
            "stages": [
                *report.stages,
                Stage(kind="export", subject="tensorrt", status="failed", seconds=0.5, error=MULTILINE_ERROR),
                Stage(kind="validate", subject="tensorrt", status="skipped", reason="nothing to validate"),
            ],
            "artifacts": [broken, *report.artifacts[1:], never_exported],
            "auto": auto,
        }
    )


class _Elements(HTMLParser):
    """Every start tag of a page with its attributes, from the standard library's parser."""

    def __init__(self, page: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def charts(self, kind: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.tags if tag == "svg" and attrs.get("data-chart") == kind]


def test_page_is_self_contained_and_escaped(report):
    odd_source = report.source.model_copy(update={"path": "/models/<odd> & name.pt2"})
    page = render_html(_with_reject_verdict(_failed_run(report)).model_copy(update={"source": odd_source}))
    elements = _Elements(page)
    for tag, attrs in elements.tags:
        for name in ("src", "href", "xlink:href", "action", "data"):
            value = (attrs.get(name) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//")), f"<{tag} {name}={value}> fetches from the network"
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert "@import" not in page and "url(" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in page
    assert "/models/&lt;odd&gt; &amp; name.pt2" in page
    assert "ValueError: rank &lt; 2 &amp; dim &gt; 4" in page
    assert "max |err| 3 &gt; atol &lt;1e-4&gt;" in page


def test_page_has_every_section(report):
    gated = _with_reject_verdict(report)
    page = render_html(gated)
    elements = _Elements(page)
    assert page.index('id="verdict"') < page.index("<main"), "the verdict banner comes first"
    assert "REJECT" in page and gated.gate.summary() in page
    assert "latency_ms_p50 0.056 ms is 40% above the baseline" in page and "the policy allows skipping it" in page

    with_histogram = {
        (a.optimization or a.format, o.name) for a in report.artifacts for c in a.checks for o in c.outputs if o.error_histogram is not None
    }
    assert len(with_histogram) >= 3, "the fixture report should have a histogram per artifact"
    assert len(elements.charts("histogram")) == len(with_histogram)
    benchmarked = [a for a in report.artifacts if any(b.status == "ok" for b in a.benchmarks)]
    assert len(benchmarked) == 3 and report.source_benchmark
    assert len(elements.charts("latency")) == len(benchmarked)
    assert len(elements.charts("timeline")) == 1
    assert all("chart" in (attrs.get("class") or "") for tag, attrs in elements.tags if tag == "svg")
    assert all(stage.name in page for stage in report.stages)

    for artifact in report.artifacts:
        assert artifact.sha256[:12] in page and artifact.path in page
    assert "policies/release.yaml" in page and "baselines/report.json" in page
    rows = re.findall(r'<tr class="([^"]*)">(.*?)</tr>', page)
    assert {css for css, cells in rows if ">regressed<" in cells} == {"failed"}
    assert {css for css, cells in rows if ">improved<" in cells} == {"good"}
    assert {css for css, cells in rows if "below the limit" in cells} == {"failed"}

    environment = page[page.index("<h2>Environment</h2>") :]
    assert report.environment.python in environment and report.environment.platform in environment
    assert all(f"<td>{name}</td><td>{version}</td>" in environment for name, version in report.environment.packages.items())


def _artifacts_table(page: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The headers of the page's artifacts table and its rows as (css class, the text of each cell)."""
    section = page[page.index('<section id="artifacts">') :]
    section = section[: section.index("</section>")]
    headers = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", section)]
    rows = [
        (css, [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", cells)])
        for css, cells in re.findall(r'<tr class="([^"]*)">(.*?)</tr>', section)
    ]
    return headers, rows


def _on_cpu(benchmarks: list[Benchmark]) -> Benchmark:
    return next(b for b in benchmarks if b.status == "ok" and b.device == "cpu")


def _p50_text(benchmark: Benchmark) -> str:
    return f"{benchmark.latency_ms_p50:.3g}" + ("⚠ unstable" if benchmark.unstable else "")


def _kilobytes(size_bytes: int) -> str:
    assert 1e3 <= size_bytes < 1e6, "the fixture's artifacts are some kB"
    return f"{size_bytes / 1e3:.3g} kB"


def test_artifacts_table_compares_every_artifact_at_a_glance(report, exported_report):
    """The lstm run's onnx, torchscript and fp16 artifacts, one row each, figures recomputed here from the report."""
    headers, rows = _artifacts_table(render_html(report, exported_report.parent))
    assert headers == [
        "format / pass",
        "verdict",
        "checks",
        "max |err|",
        "worst output",
        "min cosine",
        "p50 ms",
        "vs source",
        "size",
        "precision",
        "file",
    ]
    source = _on_cpu(report.source_benchmark)
    source_file = os.path.relpath(report.source.path, exported_report.parent)
    assert rows[0] == (
        "reference",
        ["source model (torch)", "reference", "–", "–", "–", "–", _p50_text(source), "1.00x", "–", "–", source_file],
    ), "the source's p50 leads, as the speed-ups' reference"
    assert [cells[0] for _, cells in rows[1:]] == ["onnx", "torchscript", "fp16 (onnx)"]
    for artifact, (css, cells) in zip(report.artifacts, rows[1:]):
        outputs = [o for c in artifact.checks for o in c.outputs]
        worst = max(outputs, key=lambda o: o.max_abs_error)
        timed = _on_cpu(artifact.benchmarks)
        ran = [c.status for c in artifact.checks]
        expected = [
            "passed",
            f"{ran.count('passed')} passed, {ran.count('skipped')} skipped",
            f"{worst.max_abs_error:.3g}",
            worst.name,
            f"{min(o.cosine_similarity for o in outputs):.6f}",
            _p50_text(timed),
            f"{source.latency_ms_p50 / timed.latency_ms_p50:.2f}x",
            _kilobytes(artifact.size_bytes),
            "fp16" if artifact.optimization == "fp16" else "fp32",
            Path(artifact.path).name,
        ]
        assert (css, cells[1:]) == ("", expected), artifact.key


def test_paths_are_shown_relative_to_the_page_folder(report, exported_report, tmp_path):
    out = exported_report.parent
    beside = render_html(report, out)
    assert str(out) not in beside and not re.search(r"(?<![\w.])/tmp/", beside), "no absolute path beside the artifacts"
    assert "Paths are relative to the folder of this page" in beside
    for artifact in report.artifacts:
        assert f"<code>{Path(artifact.path).name}</code>" in beside

    elsewhere = tmp_path / "pages" / "report.html"
    write_html(report, elsewhere)
    _, rows = _artifacts_table(elsewhere.read_text(encoding="utf-8"))
    for artifact, (_, cells) in zip(report.artifacts, rows[1:]):
        assert cells[-1].startswith("../"), "a path outside the page's folder climbs out of it"
        assert (elsewhere.parent / cells[-1]).resolve() == Path(artifact.path).resolve()

    as_given = render_html(report)
    assert all(f"<code>{html.escape(a.path)}</code>" in as_given for a in report.artifacts), "without a folder, paths as recorded"


def test_commands_name_their_paths_from_the_page_folder(report):
    command = "convert /models/m.pt2 --to onnx --calibration-data=/models/calib.npz --input 'x:float32[B, 8]' --out /models/out"
    page = render_html(report.model_copy(update={"command": command}), Path("/models/out"))
    shown = "convert ../m.pt2 --to onnx --calibration-data=../calib.npz --input 'x:float32[B, 8]' --out ."
    assert f"<pre>{html.escape(shown)}</pre>" in page
    relative = "convert m.pt2 --to onnx --out out"
    assert f"<pre>{relative}</pre>" in render_html(report.model_copy(update={"command": relative}), Path("/models/out"))


def test_an_unstable_p50_carries_a_warning_with_its_spread(report):
    """The fp16 artifact's p50 made unstable by hand (a real run's noise cannot be ordered): its figure is flagged in the
    artifacts table and in its benchmark table, with the spread in the tooltip; a stable figure is not."""
    fp16 = next(a for a in report.artifacts if a.optimization == "fp16")
    timed = fp16.benchmarks[0]
    p50 = timed.latency_ms_p50
    noisy = timed.model_copy(update={"unstable": True, "latency_ms_interval": [p50 * 0.8, p50 * 1.18]})

    def steady(benchmarks: list[Benchmark]) -> list[Benchmark]:
        return [b.model_copy(update={"unstable": False}) for b in benchmarks]

    unstable = report.model_copy(
        update={
            "artifacts": [a.model_copy(update={"benchmarks": [noisy] if a is fp16 else steady(a.benchmarks)}) for a in report.artifacts],
            "source_benchmark": steady(report.source_benchmark),
        }
    )
    page = render_html(unstable)
    low, high = p50 * 0.8, p50 * 1.18
    badge = (
        f'<span class="badge unstable" title="unstable: 95% interval {low:.3g}–{high:.3g} ms spans 38% of the p50 '
        f'(over 20% cannot be ranked)"'
    )
    _, rows = _artifacts_table(page)
    flagged = {cells[0] for _, cells in rows if "⚠ unstable" in cells[6]}
    assert flagged == {"fp16 (onnx)"}
    assert page.count(badge) == 2, "in the artifacts table and in the fp16 benchmark table"
    assert re.search(r"\.badge\.unstable \{ background: #[0-9a-f]{6};", page), "a coloured badge, not italics alone"


def test_failed_and_interrupted_runs_render(report):
    page = render_html(_failed_run(report))
    assert '<header id="verdict" class="verdict bad">' in page and ">FAILED<" in page
    assert "<pre>Traceback (most recent call last):\n  File &quot;&lt;export&gt;&quot;, line 3\n" in page
    assert "No checks were run." in page and "session crashed" in page and "no candidate passed" in page
    interrupted = render_html(report.model_copy(update={"passed": False, "interrupted": True, "error": "the run was interrupted"}))
    assert ">INTERRUPTED<" in interrupted and "the run was interrupted" in interrupted


def test_empty_report_renders():
    page = render_html(Report(tool_version="x", created_at="now", environment=Environment(python="3", platform="p")))
    elements = _Elements(page)
    assert ">FAILED<" in page and "No artifact was produced." in page and "No stages were recorded." in page
    assert not elements.charts("histogram") and not elements.charts("latency")


def test_write_html_writes_the_page_atomically(report, tmp_path):
    target = tmp_path / "reports" / "report.html"
    write_html(report, target)
    assert target.read_text(encoding="utf-8") == render_html(report, target.parent.resolve())
    assert [p.name for p in target.parent.iterdir()] == ["report.html"], "no temporary file is left behind"


def test_browser_draws_the_verdict_and_the_charts(report, rejected_gate_report, tmp_path):
    """Screenshots of a real gate's rejection and of a passing conversion, checked for the banner and the chart bars."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"chromium is not installed ({CHROMIUM} is missing): run `make install`, which apt-installs it")
    rejected = Report.from_json(rejected_gate_report.read_text())
    for name, rendered, banner_color, word in (("reject", rejected, REJECT_RED, "REJECT"), ("passed", report, PROMOTE_GREEN, "PASSED")):
        page = tmp_path / f"{name}.html"
        write_html(rendered, page)
        screenshot = tmp_path / f"{name}.png"
        _chromium(tmp_path, "--hide-scrollbars", "--window-size=1280,4800", f"--screenshot={screenshot}", page.as_uri())
        print(f"screenshot of the {name} report: {screenshot}")
        pixels = _read_png(screenshot)
        assert pixels.shape[:2] == (4800, 1280)

        banner = _matches(pixels[:600], banner_color)
        assert banner[:20].mean() > 0.95, f"the {word} banner should fill the top of the page"
        banner_rows = int((banner.mean(axis=1) > 0.5).sum())
        assert banner_rows >= 100, f"the {word} banner is only {banner_rows} px tall"
        blue = int(_matches(pixels, CHART_BLUE).sum())
        assert blue >= 2000, f"only {blue} pixels of chart blue: no chart was drawn"

        dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
        assert f">{word}<" in dom and 'id="verdict"' in dom
        assert "<script>alert" not in dom


def _chromium(tmp_path: Path, *arguments: str) -> str:
    """Run headless Chromium on its own fresh profile, offline, and return what it printed."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--force-color-profile=srgb",
        f"--user-data-dir={profile}",
        *arguments,
    ]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-3000:]}"
    return done.stdout


def _matches(pixels: np.ndarray, color: tuple[int, int, int], tolerance: int = 2) -> np.ndarray:
    """Which pixels are ``color`` (within a small tolerance per channel)."""
    return (np.abs(pixels[..., :3].astype(np.int16) - np.array(color, dtype=np.int16)) <= tolerance).all(axis=-1)


def _read_png(path: Path) -> np.ndarray:
    """The pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes) as (height, width, channels)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    position, compressed = 8, bytearray()
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        position += 12 + length  # length, type, body, crc
        if kind == b"IHDR":
            width, height, depth, color_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed += body
    assert depth == 8 and color_type in (2, 6) and interlace == 0, f"unexpected PNG layout in {path}"
    channels = 3 if color_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(bytes(compressed))
    pixels = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        start = y * (stride + 1)
        filter_type, line = raw[start], np.frombuffer(raw, np.uint8, stride, start + 1)
        if filter_type == 0:
            pixels[y] = line
        elif filter_type == 1:  # Sub: a running sum along the row, per channel (uint8 wraps like PNG's mod 256)
            pixels[y] = np.cumsum(line.reshape(width, channels), axis=0, dtype=np.uint8).reshape(-1)
        elif filter_type == 2:  # Up
            pixels[y] = line + previous
        elif filter_type in (3, 4):  # Average and Paeth depend on the byte just decoded: done byte by byte
            decoded = _unfilter_sequentially(filter_type, line.tolist(), previous.tolist(), channels)
            pixels[y] = np.frombuffer(decoded, np.uint8)
        else:
            raise AssertionError(f"unknown PNG filter type {filter_type} in {path}")
        previous = pixels[y]
    return pixels.reshape(height, width, channels)


def _unfilter_sequentially(filter_type: int, line: list[int], above: list[int], pixel_bytes: int) -> bytes:
    decoded = bytearray(len(line))
    for i, value in enumerate(line):
        left = decoded[i - pixel_bytes] if i >= pixel_bytes else 0
        up = above[i]
        if filter_type == 3:
            predictor = (left + up) >> 1
        else:
            upper_left = above[i - pixel_bytes] if i >= pixel_bytes else 0
            estimate = left + up - upper_left
            to_left, to_up, to_upper_left = abs(estimate - left), abs(estimate - up), abs(estimate - upper_left)
            predictor = left if to_left <= to_up and to_left <= to_upper_left else up if to_up <= to_upper_left else upper_left
        decoded[i] = (value + predictor) & 0xFF
    return bytes(decoded)
