"""A model past the 2 GB protobuf limit: exported to ONNX with its weights in external data, validated against the
source, published with every file it needs, and nothing else left behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import load_report, run_cli

WIDTH, LAYERS = 8192, 8  # with the 64-wide ends: 537,919,488 fp32 parameters, 2.15 GB, just past 2**31 bytes


@pytest.mark.slow
def test_a_model_past_2_gb_is_exported_with_external_data_and_validated(tmp_path, monkeypatch):
    from fixtures.large_torch import write_mlp

    model, out, scratch = tmp_path / "big.pt2", tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    try:
        assert write_mlp(model, WIDTH, LAYERS) * 4 > 2**31
        monkeypatch.setenv("TMPDIR", str(scratch))  # the run's temporary files go where this test can see them
        run = run_cli(str(model), "--to", "onnx", "--out", str(out))
        assert run.returncode == 0, run.output
        artifact = next(a for a in load_report(out / "report.json")["artifacts"] if a["format"] == "onnx")
        files = [Path(f) for f in artifact["files"]]
        assert [f.name for f in files] == ["big.onnx", "big.onnx.data"]
        assert artifact["size_bytes"] == sum(f.stat().st_size for f in files) > 2**31
        cpu = [c for c in artifact["checks"] if c["runtime"] == "onnxruntime" and c["device"] == "cpu"]
        assert cpu and all(c["status"] == "passed" for c in cpu), cpu
        # real numbers were compared: outputs of zeros (or of weights never filled) would match exactly
        assert all(0 < o["max_abs_error"] < 1e-3 for c in cpu for o in c["outputs"])
        assert sorted(p.name for p in out.iterdir()) == ["big.onnx", "big.onnx.data", "report.json"]
        # onnxruntime 1.31's telemetry writes (and keeps) a session file, $TMPDIR/.ses, when it is imported
        assert [p.name for p in scratch.iterdir() if p.name != ".ses"] == []
    finally:  # pytest keeps the folders of its last runs: 4 GB each here
        model.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)
