"""What every optimization's artifact computes in, on the suite's CNN, its BERT folder and its Llama decoder: each
report's precision detail (shares of multiply-accumulates by type, measured from the artifact and its runtime, and the
pass's claim judged at the default --min-precision-share).

    python -m benchmarks.precision [RESULTS_FILE]

Each model goes through the installed ``convert`` console script with ``--to onnx`` and every pass this machine can
build (TensorRT needs an NVIDIA GPU); the table is read from the reports. Writes benchmarks/results/precision.md by
default. The figures are counts, not timings: they are the same on every run of the same versions.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path(__file__).parent / "results" / "precision.md"
EXECUTORCH_PASSES = "executorch:int8"
PASSES = "simplify,fp16,int8,int8-dynamic,int4,int8-weights,openvino,openvino:fp16,openvino:int8,openvino:int4,openvino:int8-weights"


def models(folder: Path) -> dict[str, list[str]]:
    """The CLI arguments that give each model."""
    from fixtures.transformers_folders import write_folder

    return {
        "SmallCNN (fixtures/torch_models.py, 2 convolutions + a linear head)": [
            "fixtures.torch_models:build_cnn",
            "--framework",
            "torch",
            "--trust-code",
            "--input",
            "x:float32[B,3,32,32]",
        ],
        "BertForMaskedLM (hidden 32, 2 layers, vocabulary 1000)": [str(write_folder("bert", folder / "bert"))],
        "LlamaForCausalLM (hidden 32, 2 layers, vocabulary 1000, untied head)": [str(write_folder("llama", folder / "llama"))],
    }


def convert(arguments: list[str], out: Path) -> dict:
    """Every pass from the ONNX export, then the ExecuTorch program and its INT8 pass, in one report's artifacts."""
    found: dict = {"artifacts": []}
    for targets, passes, folder in (("onnx", PASSES, out), ("executorch", EXECUTORCH_PASSES, out.with_name(f"{out.name}-pte"))):
        command = [str(Path(sys.executable).with_name("convert")), *arguments, "--to", targets, "--optimize", passes, "--out", str(folder)]
        subprocess.run(command, cwd=REPO, check=False, capture_output=True, text=True)
        report = json.loads((folder / "report.json").read_text())
        found["artifacts"] += report["artifacts"]
        found.setdefault("unbuilt", []).extend(report.get("unbuilt") or [])
    return found


def rows(report: dict) -> list[list[str]]:
    from convert.precision import figure, macs_text, percent

    found = []
    for artifact in report["artifacts"]:
        attested = next((d for d in artifact["details"] if d["kind"] == "precision"), None)
        if attested is None:
            continue
        share = percent(attested["attested_share"]) if attested["status"] in ("passed", "failed") else "-"
        found.append(
            [
                artifact["optimization"] or f"{artifact['format']} (export)",
                f"{attested['claimed']} ({attested['claim']})",
                figure(attested["compute"]),
                figure(attested["weights"]),
                figure(attested["runtime_compute"]) + (" *" if attested["runtime_note"] else ""),
                share,
                attested["status"] + ("" if artifact["passed"] or attested["status"] == "failed" else ", values failed"),
                macs_text(attested["macs"]) + (" †" if attested["shape"].startswith("the dims") else ""),
            ]
        )
    for unbuilt in report.get("unbuilt") or []:
        found.append([unbuilt["artifact"], "-", "-", "-", "-", "-", f"not built: {unbuilt['reason']}", "-"])
    return found


def render(tables: dict[str, tuple[dict, list[list[str]]]]) -> str:
    lines = [
        "# What each artifact computes in",
        "",
        f"`python -m benchmarks.precision`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, Python "
        f"{platform.python_version()}. Every pass this machine builds (TensorRT needs an NVIDIA GPU), each artifact's "
        "`precision` detail from its report: the share of its multiply-accumulates (convolutions, matrix products, Gemm and "
        "their quantized forms, sized at the first validated shape) by the type the artifact computes them in and the type "
        "it stores their weights in, read from the ONNX graph, the OpenVINO IR or the .pte's XNNPACK graphs; what the runtime computes them in on "
        "the CPU (ONNX Runtime's CPU provider, OpenVINO's compiled CPU model at the f32 inference precision the runners "
        "use); and the claim judged at the default `--min-precision-share` 0.5. A claim is `compute` or `weights` "
        "(weight-only passes, and OpenVINO's FP16 compression, whose arithmetic the runtime chooses).",
        "",
        "`*`: the runtime computes otherwise than the artifact describes (ONNX Runtime's CPU provider has no FP16 "
        "MatMul, Conv or Gemm kernel and casts their inputs to FP32). `values failed`: the artifact missed its accuracy "
        "budget as well. `†`: a .pte is sized at the dims it stores, each dynamic one at the bound ExecuTorch planned "
        "(its shares, not its count, compare with the ONNX rows).",
        "",
    ]
    for title, (report, table) in tables.items():
        shape = next(
            (d["shape"] for a in report["artifacts"] for d in a["details"] if d["kind"] == "precision" and d["shape"]),
            "",
        )
        lines += [f"## {title}", "", f"Measured at {shape}.", ""]
        lines += [
            "| artifact | claims | computes | weights stored | runtime computes | attested | status | MACs |",
            "|---|---|---|---|---|---:|---|---:|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in table]
        lines.append("")
    lines += [
        "Read it as: ONNX Runtime's static INT8 (QDQ) quantizes every product, attention's included, and OpenVINO's "
        "compiled model runs the INT8 IR's in INT8. ONNX Runtime's dynamic INT8 computes in INT8 the convolutions and "
        "each MatMul whose weight is an initializer, not a head that reads a tied embedding through a Transpose "
        "(BERT's: most of the arithmetic of a model this small, so the artifact fails its claim; about a fifth of "
        "BERT-base's). ONNX Runtime's weight-only passes leave the same head, and every convolution, in FP32 (the CNN's "
        "artifacts store less than 0.1% of their weights in fewer bits). NNCF's weight compression keeps the first and "
        "last layers in INT8 under INT4 by design (both integer, so the claim holds). ExecuTorch's PT2E INT8 pass computes "
        "every product of the CNN in INT8, read from the .pte's XNNPACK graphs; it is not built for the two transformers "
        "(PT2E fails with an IndexError). A .pte is sized at its planned bounds, so its count is larger than the ONNX "
        "rows' at the validated shape.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    results = Path(argv[0]) if argv else DEFAULT_RESULTS
    with tempfile.TemporaryDirectory(prefix="precision-") as scratch:
        folder = Path(scratch)
        tables = {}
        for index, (title, arguments) in enumerate(models(folder).items()):
            report = convert(arguments, folder / f"out{index}")
            tables[title] = (report, rows(report))
    results.write_text(render(tables))
    print(f"wrote {results}")


if __name__ == "__main__":
    main(sys.argv[1:])
