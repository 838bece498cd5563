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
