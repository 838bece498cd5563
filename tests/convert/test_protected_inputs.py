"""The check that a run's writes never replace, remove or land inside what it reads (the CLI cases are in
test_bad_inputs.py; these are the rules themselves, on plain files)."""

from __future__ import annotations

import pytest

from convert.errors import ConvertError
from convert.protected_inputs import Read, Write, reads_of, refuse_writes_to_inputs


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "model.pt2").write_bytes(b"model")
    (tmp_path / "saved" / "variables").mkdir(parents=True)
    (tmp_path / "saved" / "saved_model.pb").write_bytes(b"graph")
    return tmp_path


@pytest.mark.parametrize(
    "write, says",
    [
        (lambda t: Write("the artifact", t / "model.pt2"), "would replace the model"),
        (lambda t: Write("the artifact", t / "saved" / "variables" / "x.onnx"), "would land inside the model"),
        (lambda t: Write("the output folder", t / "saved", replaces=False), "would write into the model"),
        (lambda t: Write("a folder", t, replaces=True), "would remove the model"),
        (lambda t: Write("the report", t / "link.pt2"), "resolves to"),
    ],
)
def test_a_write_over_an_input_is_refused(tree, write, says):
    (tree / "link.pt2").symlink_to(tree / "model.pt2")
    with pytest.raises(ConvertError) as refused:
        refuse_writes_to_inputs([write(tree)], [Read("the model", tree / "model.pt2"), Read("the model", tree / "saved")])
    assert says in refused.value.problem and "--force" in refused.value.problem


def test_writing_beside_an_input_is_allowed(tree):
    """The output folder may hold the model; only the paths the run writes must differ from it."""
    refuse_writes_to_inputs(
        [
            Write("the output folder", tree, replaces=False),
            Write("the artifact", tree / "model.onnx"),
            Write("the report", tree / "report.json"),
        ],
        [Read("the model", tree / "model.pt2")],
    )


def test_a_file_inside_an_input_folder_that_links_elsewhere_is_protected(tree, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("data") / "calib.npz"
    elsewhere.write_bytes(b"arrays")
    (tree / "calib").mkdir()
    (tree / "calib" / "a.npz").symlink_to(elsewhere)
    with pytest.raises(ConvertError, match="inside"):
        refuse_writes_to_inputs([Write("the report", elsewhere)], [Read("the calibration data", tree / "calib")])


def test_reads_of_names_paths_and_skips_the_rest(tree):
    reads = reads_of(tree / "model.pt2", weights=None, params={"w": 1}, calibration_data=tree / "saved")
    assert [(r.what, r.path) for r in reads] == [("the model", tree / "model.pt2"), ("the calibration data", tree / "saved")]
    assert reads_of("fixtures.torch_models:build_cnn") == []
