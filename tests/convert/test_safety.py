"""Archives and folders that point outside themselves are refused before any loader reads them (exit 2, nothing written)."""

from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path

import pytest

from tests.conftest import run_cli


def _archive(path: Path, name: str, symlink: bool = False) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("cnn/archive_format", "pt2")
        info = zipfile.ZipInfo(name)
        if symlink:
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd" if symlink else "payload")
    return path


@pytest.mark.parametrize("member, symlink", [("../../escaped.txt", False), ("/tmp/absolute.txt", False), ("cnn/data/link", True)])
def test_an_archive_member_pointing_outside_is_refused(tmp_path, member, symlink):
    model = _archive(tmp_path / "model.pt2", member, symlink)
    done = run_cli(str(model), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.output
    message = " ".join(done.stderr.split())
    assert "has an archive member that points outside it" in message and member in message and "Traceback" not in done.output
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "escaped.txt").exists()


def test_a_model_folder_with_a_symlink_leading_outside_is_refused(keras_files, tmp_path):
    folder = tmp_path / "two_io_savedmodel"
    shutil.copytree(keras_files / "two_io_savedmodel", folder)
    (folder / "assets").mkdir(exist_ok=True)
    (folder / "assets" / "vocab.txt").symlink_to("/etc/passwd")
    done = run_cli(str(folder), "--trust-code", "--to", "onnx", "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.output
    assert "has a symlink that leads outside it: assets/vocab.txt -> /etc/passwd" in " ".join(done.stderr.split())
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "location, expected",
    [("../escaped.bin", "points outside the directory"), ("ESCAPED", "should be a relative path"), ("link.bin", "is a symbolic link")],
)
def test_onnx_external_data_pointing_outside_its_folder_is_refused(tmp_path, location, expected):
    """Every ONNX artifact goes through onnx_artifact, whose onnx.checker refuses external data outside the model's folder."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from convert.backends.onnx import onnx_artifact

    outside = tmp_path / "escaped.bin"
    outside.write_bytes(np.ones((4, 4), np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "link.bin").symlink_to(outside)
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    onnx.external_data_helper.set_external_data(weight, location=str(outside) if location == "ESCAPED" else location)
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    onnx.save(helper.make_model(graph), str(folder / "model.onnx"))
    with pytest.raises(onnx.checker.ValidationError, match=expected):
        onnx_artifact(folder / "model.onnx")
