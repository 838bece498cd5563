"""A decoder larger than the memory the run may use converts and validates (shape cases and greedy generation), under a
real cgroup v1 memory limit: transformers leaves the safetensors weights memory-mapped, the export writes them to
external data, and ONNX Runtime reads the artifact's weights from their file (pre-packing off) instead of copying them.
Its INT4 compressions (ONNX Runtime's and NNCF's) run inside the limit too, reading the weights from the file.
The report records the limit, each stage's peak memory and which checks ran memory-mapped. Loading the same artifact
the default way (pre-packed weights) inside the same limit is killed by it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, convert_command, load_report

CGROUP = Path("/sys/fs/cgroup/memory")
LIMIT = 2 << 30  # bytes: less than the model's 2.69 GB of fp32 weights
LAYERS, HIDDEN, INTERMEDIATE = 12, 2048, 5632  # 672 million parameters


@pytest.fixture
def memory_limit():
    """A cgroup v1 memory group limited to LIMIT, with no swap; the Python statement that moves a process into it (its
    children follow)."""
    if not os.access(CGROUP, os.W_OK):
        pytest.skip(f"{CGROUP} is not writable here (the cgroup v1 memory controller needs root)")
    group = CGROUP / f"convert-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    (group / "memory.limit_in_bytes").write_text(str(LIMIT))
    (group / "memory.swappiness").write_text("0")
    yield group, f"import os; open({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))"
    group.rmdir()


@pytest.mark.slow(reason="2.7 GB of weights under a 2 GiB limit, exported and compressed twice: the size is the point")
def test_a_decoder_larger_than_the_memory_limit_converts_and_validates_within_it(memory_limit, tmp_path):
    from fixtures.large_transformers import write_llama

    group, enter = memory_limit
    folder, out = tmp_path / "llama", tmp_path / "out"
    write_llama(folder, LAYERS, HIDDEN, INTERMEDIATE)
    weights = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    assert weights > LIMIT * 1.25
    # random weights score a vocabulary almost alike, so INT4's budget is loosened: this test is about memory, and the
    # budgets of weight-only artifacts are tested in test_weight_only.py
    loosened = ("--accuracy", "cosine>=0.5,rel_rms<=1.5,token_agreement>=0")
    args = (str(folder), "--task", "text-generation-with-past", "--to", "onnx", "--optimize", "int4,openvino:int4", *loosened)
    args = (*args, "--samples", "1", "--out", str(out), "--no-cache")
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    run = subprocess.run(convert_command(enter, *args), env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout + run.stderr
    assert int((group / "memory.failcnt").read_text()) > 0  # the limit was reached, and held: pages were reclaimed
    report = load_report(out / "report.json")
    assert report["environment"]["memory_limit_mb"] == LIMIT / 2**20
    assert report["environment"]["memory_available_mb"] < LIMIT / 2**20
    # resident memory counts the memory-mapped weights' pages, which the limit reclaims (and those the folder's writer
    # left in the page cache, charged to it): each stage's peak is recorded, and the kernel held the group to the limit
    assert all(stage["status"] == "ok" and stage["peak_rss_mb"] > 0 for stage in report["stages"]), report["stages"]
    assert int((group / "memory.max_usage_in_bytes").read_text()) <= LIMIT
    (artifact,) = [a for a in report["artifacts"] if a["format"] == "onnx" and not a["optimization"]]
    assert artifact["passed"] and artifact["size_bytes"] > LIMIT
    # INT4 compression inside the limit: ONNX Runtime's quantizer given one weight at a time, OpenVINO reading the
    # ONNX weights from their file (convert_model would copy them all into memory)
    compressed = {a["optimization"]: a for a in report["artifacts"] if a["optimization"]}
    assert all(a["passed"] for a in compressed.values()) and set(compressed) == {"int4", "openvino:int4"}, compressed
    assert compressed["openvino:int4"]["strategy"].startswith("openvino.Core().read_model")
    ran = [c for c in artifact["checks"] if c["status"] != "skipped"]  # a CUDA check is skipped here, its runtime never loaded
    assert {c["kind"] for c in ran} == {"shape", "generation"} and all(c["status"] == "passed" and c["memory_mapped"] for c in ran)
    # the artifact loaded as ONNX Runtime loads it by default, its weights pre-packed into memory, exceeds the limit
    load = f"{enter}\nimport onnxruntime\nonnxruntime.InferenceSession({artifact['path']!r}, providers=['CPUExecutionProvider'])\nprint('loaded')"
    default = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=600)
    assert default.returncode == -9 and "loaded" not in default.stdout, (default.returncode, default.stderr[-2000:])
