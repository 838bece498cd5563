"""The rendering logic of benchmarks/optimize.py on hand-made rows: when a compute bound may be printed, how the targets
are judged on the intervals and the CPU's capabilities, and how rows tied within the noise share a rank."""

from __future__ import annotations

import re

from benchmarks import optimize
from convert.reports import model as rm

VNNI = rm.CpuInfo(
    model="Test CPU",
    architecture="x86_64",
    logical_cores=4,
    usable_cores=2,
    features=["avx2", "avx512_vnni"],
    int8_compute=True,
    known=True,
)
NO_VNNI = rm.CpuInfo(model="Old CPU", architecture="x86_64", logical_cores=4, usable_cores=2, features=["avx2", "fma"], known=True)
WIDENED = "this CPU has no integer dot-product instructions (VNNI, AMX-INT8, Arm dot product): INT8 runs on widening"
# at 100 GFLOP/s the bound is 10 ms at batch 1 and 80 ms at batch 8
FLOPS = {1: 1e9, optimize.BATCH: 8e9}
PEAK = optimize.Peak(before=90.0, after=100.0, details={("numpy", 1024): (90.0, 100.0)})


def bench(p50: float, low: float, high: float, batch_ms: tuple[float, float, float] | None = None, limit: str = "") -> rm.Benchmark:
    """A benchmark with its p50 and interval at batch 1, and (``batch_ms``: p50, low, high) at the throughput batch."""
    record = rm.Benchmark(
        runtime="rt", device="cpu", shape="B=1", latency_ms_p50=p50, latency_ms_interval=[low, high], rounds=20, compute_limit=limit
    )
    record.unstable = (high - low) / p50 > 0.2
    if batch_ms:
        p, lo, hi = batch_ms
        items = optimize.BATCH
        record.throughput_shape = f"B={items}"
        record.throughput_per_s = items * 1e3 / p
        record.throughput_interval = [items * 1e3 / hi, items * 1e3 / lo]
    return record


def row(candidate: str, precision: str, record: rm.Benchmark) -> dict:
    runtime = "torch eager" if candidate == "source" else "onnxruntime"
    return optimize._row("bert", candidate, runtime, precision, record, True, 0.999)


def render(rows: list[dict], cpu: rm.CpuInfo = VNNI, candidates: list[rm.AutoCandidate] | None = None) -> str:
    auto = {"chosen": "none", "criterion": "", "candidates": candidates or [], "flops": FLOPS, "cpu": cpu, "threads": 2}
    return optimize.render(rows, {"bert": auto}, PEAK)


def section(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_a_row_faster_than_the_bound_invalidates_the_peak():
    rows = [
        row("source", "fp32", bench(14.0, 13.0, 15.0, (100, 95, 105))),
        row("none", "fp32", bench(9.5, 9.2, 9.9, (85, 82, 88))),  # 9.5 ms < the 10 ms bound: impossible
    ]
    text = render(rows)
    assert "the measured peak (100.0 GFLOP/s) is below what none (onnxruntime, fp32) at batch 1 achieved (105.3 GFLOP/s at its p50)" in text
    assert "so no compute bound is given" in text
    assert "x bound" not in section(text, "## BERT", "Targets:")
    assert "Compute lower bound at" not in text
    assert text.count("**not judged**: the peak is invalid") == 2


def test_the_fastest_rounds_below_the_bound_invalidate_it_too():
    rows = [row("none", "fp32", bench(10.5, 9.8, 11.0, (85, 82, 88)))]  # p50 above the bound, its interval's low end below
    text = render(rows)
    assert "(102.0 GFLOP/s in its fastest rounds, the low end of its p50's 95% interval)" in text
    assert "x bound" not in section(text, "## BERT", "Targets:")


def test_a_valid_bound_is_printed_for_fp32_rows_only_and_never_below_one():
    rows = [
        row("source", "fp32", bench(14.0, 13.5, 14.5, (100, 97, 103))),
        row("none", "fp32", bench(12.0, 11.5, 12.5, (90, 88, 92))),
        row("openvino", "fp32", bench(12.2, 11.8, 12.6, (84, 81.6, 86.4))),
        row("int8", "int8", bench(4.0, 3.9, 4.1, (30, 29, 31))),
    ]
    text = render(rows)
    assert "Compute lower bound at 100.0 GFLOP/s: batch 1 10.0 ms, batch 8 80.0 ms." in text
    assert "90.0 GFLOP/s before the models, 100.0 GFLOP/s after" in text
    table = [line for line in section(text, "## BERT", "`x bound` is given").splitlines() if line.startswith("| ")]
    header = [c.strip() for c in table[0].split("|")]
    at, candidate, batch = header.index("x bound"), header.index("candidate"), header.index("batch")
    cells = {}
    for line in table[1:]:
        parts = [c.strip() for c in line.split("|")]
        cells[(parts[candidate], parts[batch])] = parts[at]
    printed = [float(x) for key, cell in cells.items() if key[0] != "int8" for x in re.findall(r"\d+\.\d+", cell)]
    assert printed and min(printed) >= 1.0
    assert "batch 1: best FP32 ≤ 1.3x the compute lower bound: none (onnxruntime, fp32) at 1.20x (1.15–1.25) the bound: **met**" in text
    assert "batch 8: best FP32 ≤ 1.3x the compute lower bound: openvino (onnxruntime, fp32) at 1.05x (1.02–1.08) the bound: **met**" in text


def test_the_bound_target_is_missed_or_within_the_noise_on_the_interval():
    missed = optimize.bound_target([row("none", "fp32", bench(14.0, 13.5, 14.5))], 1, FLOPS[1], 100.0, "")
    noise = optimize.bound_target([row("none", "fp32", bench(13.0, 12.5, 13.5))], 1, FLOPS[1], 100.0, "")
    assert "**missed**" in missed and "**within the noise of the target**" in noise


def test_the_int8_target_is_not_applicable_without_integer_dot_products():
    rows = [
        row("none", "fp32", bench(12.0, 11.5, 12.5, (90, 88, 92))),
        row("int8", "int8", bench(14.0, 13.5, 14.5, (100, 97, 103), limit=WIDENED)),
        row("openvino:int8", "int8", bench(13.0, 12.5, 13.5, (95, 93, 97), limit=WIDENED)),
    ]
    text = render(rows, cpu=NO_VNNI)
    assert text.count("**not applicable on this CPU (no VNNI/AMX/dot-product: INT8 runs widened)**") == 2
    int8_lines = [line for line in section(text, "Targets:", "`--optimize auto`").splitlines() if "best INT8" in line]
    assert len(int8_lines) == 2 and not any("**met**" in line or "**missed**" in line for line in int8_lines)
    assert "for the record, openvino:int8 (onnxruntime, int8) is 0.92x" in int8_lines[0]
    assert f"Compute limit of int8, openvino:int8: {WIDENED}." in text
    assert (
        "CPU: Old CPU (x86_64); ISA features: avx2, fma (INT8 compute: no, FP16 compute: no); 2 of 4 cores usable; 2 intra-op threads"
        in text
    )


def test_the_int8_target_is_judged_on_the_ratio_interval():
    fp32 = row("none", "fp32", bench(12.0, 11.8, 12.2))

    def verdict(p50: float, low: float, high: float) -> str:
        return optimize.int8_target([fp32, row("int8", "int8", bench(p50, low, high))], 1, VNNI)

    assert "**met**" in verdict(5.0, 4.9, 5.1)  # 12/5 = 2.4x, 2.31–2.49
    assert "**missed**" in verdict(8.0, 7.9, 8.1)  # 1.5x
    assert "**within the noise of the target**" in verdict(6.0, 5.5, 6.5)  # 1.82–2.22
    assert "**not judged**: no INT8 artifact" in optimize.int8_target([fp32], 1, VNNI)


def test_rows_whose_ratio_reaches_within_5_percent_of_1_share_a_rank():
    figures = [bench(10.0, 9.0, 11.0), bench(10.5, 10.2, 11.5), bench(11.0, 11.2, 12.0), bench(20.0, 19.0, 21.0), bench(30.0, 29.0, 31.0)]
    assert optimize.tied_ranks(figures) == ["1=", "1=", "1=", "4", "5"]
    assert optimize.tied_ranks([bench(10.0, 9.9, 10.1), bench(11.0, 10.9, 11.1)]) == ["1", "2"]  # 1.08–1.12: apart
    # 1.02–1.04: a difference this run shows, smaller than what moves from one run to the next
    assert optimize.tied_ranks([bench(10.0, 9.95, 10.05), bench(10.3, 10.25, 10.35)]) == ["1=", "1="]


def test_the_candidates_table_carries_the_paired_ratio_to_the_chosen():
    paired = rm.PairedRatio(ratio=1.01, interval=[0.98, 1.04], rounds=20, paired=True, within_noise=True)
    candidates = [
        rm.AutoCandidate(
            name="none", format="onnx", rank=1, status="chosen", latency_ms_p50=12.0, latency_ms_interval=[11.6, 12.4], reason="simpler"
        ),
        rm.AutoCandidate(
            name="simplify",
            format="onnx",
            rank=2,
            status="lost",
            latency_ms_p50=12.1,
            latency_ms_interval=[11.7, 12.5],
            vs_chosen=paired,
            reason="tie",
        ),
    ]
    text = render([row("none", "fp32", bench(12.0, 11.6, 12.4))], candidates=candidates)
    assert "| 1= | none | fp32 | chosen | 12.0 (11.6–12.4) |" in text
    assert "| 1= | simplify | fp32 | lost | 12.1 (11.7–12.5) |  | 1.01x (95% interval 0.98–1.04, paired over 20 rounds) |" in text


def test_the_edge_section_shows_intervals_and_the_cpu():
    onnx = bench(8.0, 7.8, 8.2, (40, 39, 41))
    rows = [
        optimize._edge_row("mobilenet_v2", 1, "onnx", onnx, "fp32", True, NO_VNNI),
        optimize._edge_row("mobilenet_v2", 1, "tflite", bench(7.0, 6.0, 9.0), "fp32", True, NO_VNNI, fixed=True),
        optimize._edge_row("mobilenet_v2", 1, "executorch:int8", None, "int8", False, NO_VNNI, why="cosine 0.9"),
    ]
    text = optimize.render_edge(rows, (1,))
    assert "CPU: Old CPU (x86_64)" in text
    assert "| 1= | tflite | rt | - | fp32 | yes, fixed at the export shape |" in text
    assert "| 7.00 (6.00–9.00) | batch 2 | - |" in text
    assert "| 1= | onnx |" in text and "| 8.00 (7.80–8.20) |  | 40.0 (39.0–41.0) | 1.00 |" in text
    assert "| - | executorch:int8 | - | - | int8 | no: cosine 0.9 |" in text


def test_server_only_and_edge_only_keep_the_other_section(tmp_path, monkeypatch):
    fp32 = bench(12.0, 11.6, 12.4, (90, 88, 92))
    calls = []
    monkeypatch.setattr(optimize, "measure_peak", lambda details=None: calls.append("peak") or 100.0)
    monkeypatch.setattr(optimize, "MODELS", {"bert": "BERT"})
    monkeypatch.setattr(
        optimize,
        "run_model",
        lambda name, folder: (
            [row("none", "fp32", fp32)],
            {"chosen": "none", "criterion": "", "candidates": [], "flops": FLOPS, "cpu": VNNI, "threads": 2},
        ),
    )
    monkeypatch.setattr(optimize, "run_edge", lambda name, folder, threads: calls.append("edge") or [])
    results = tmp_path / "optimize.md"
    results.write_text("# old server part\n\n## Edge artifacts\n\nold edge part\n")
    assert optimize.main([str(results), "--server-only"]) == 0
    text = results.read_text()
    assert calls == ["peak", "peak"] and "## BERT" in text and text.endswith("## Edge artifacts\n\nold edge part\n")
    assert optimize.main([str(results), "--edge-only"]) == 0
    text = results.read_text()
    assert "## BERT" in text and "old edge part" not in text and "edge" in calls
    assert optimize.main([str(results), "--edge-only", "--server-only"]) == 2
