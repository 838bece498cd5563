"""The four dataset forms give the same samples, only the chosen ones are read, bad data is a clear error, and a
dataset larger than the process's memory is read without loading it whole."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from convert.datasets import chosen_indices, open_dataset, parse_columns, parse_preprocess
from convert.errors import ConvertError
from convert.specs import parse_input_specs
from tests.conftest import REPO

IMAGE_SPECS = parse_input_specs(("x:float32[B,3,8,8]",))
TEXT_SPECS = parse_input_specs(("input_ids:int64[B,S]", "attention_mask:int64[B,S]"))


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    """Eight 8x8 RGB images of two classes, as uint8 pixels, their labels, and the folder of PNGs."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(8, 8, 8, 3), dtype=np.uint8)
    labels = np.array([0, 1] * 4)
    for index, (image, label) in enumerate(zip(pixels, labels)):
        (folder / f"class{label}").mkdir(exist_ok=True)
        Image.fromarray(image).save(folder / f"class{label}" / f"{index:03d}.png")
    return folder, pixels, labels


def test_the_forms_give_the_same_samples(images, tmp_path):
    folder, pixels, labels = images
    preprocess = parse_preprocess("mean=0.5,0.5,0.5;std=0.25,0.25,0.25")
    from_images = list(open_dataset(folder, IMAGE_SPECS, preprocess=preprocess).read(list(range(8))))
    order = [sample.index for sample in from_images]
    expected = ((pixels.astype(np.float32) / 255 - 0.5) / 0.25).transpose(0, 3, 1, 2)
    # the image folder numbers its samples class by class: class0's files first
    by_class = [i for label in (0, 1) for i in range(8) if labels[i] == label]
    np.testing.assert_allclose(np.concatenate([s.feed["x"] for s in from_images]), expected[by_class], atol=1e-6)
    assert [int(s.label[0]) for s in from_images] == [0] * 4 + [1] * 4 and order == list(range(8))

    np.savez(tmp_path / "rows.npz", x=expected, label=labels)
    rows = list(open_dataset(tmp_path / "rows.npz", IMAGE_SPECS).read([1, 5]))
    assert [s.feed["x"].shape for s in rows] == [(1, 3, 8, 8)] * 2
    np.testing.assert_array_equal(rows[1].feed["x"][0], expected[5])
    assert rows[1].label.tolist() == [labels[5]]

    (tmp_path / "feeds").mkdir()
    for index in range(3):
        np.savez(tmp_path / "feeds" / f"{index}.npz", pixels=expected[index : index + 2], target=labels[index : index + 2])
    feeds = open_dataset(tmp_path / "feeds", IMAGE_SPECS, parse_columns(("x=pixels,label=target",)))
    assert feeds.kind == "npz-folder" and feeds.size == 3 and feeds.labelled
    last = next(iter(feeds.read([2])))
    np.testing.assert_array_equal(last.feed["x"], expected[2:4])
    assert last.label.tolist() == labels[2:4].tolist()


def test_a_datasets_folder_maps_columns_and_keeps_each_row_its_own_length(tmp_path):
    import datasets

    tokens = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 12]]
    datasets.Dataset.from_dict({"tokens": tokens, "mask": [[1] * len(t) for t in tokens], "target": [0, 1, 0]}).save_to_disk(
        tmp_path / "text"
    )
    with pytest.raises(ConvertError, match="no column for the input input_ids"):
        open_dataset(tmp_path / "text", TEXT_SPECS)
    dataset = open_dataset(tmp_path / "text", TEXT_SPECS, parse_columns(("input_ids=tokens", "attention_mask=mask,label=target")))
    samples = list(dataset.read([0, 2]))
    assert dataset.kind == "hf-datasets" and dataset.labelled and dataset.size == 3
    assert [s.feed["input_ids"].tolist() for s in samples] == [[tokens[0]], [tokens[2]]]
    assert [s.feed["input_ids"].dtype for s in samples] == [np.int64] * 2
    assert [s.label.tolist() for s in samples] == [[0], [0]]

    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"tokens": tokens}), "validation": datasets.Dataset.from_dict({"tokens": tokens})}
    ).save_to_disk(tmp_path / "splits")
    with pytest.raises(ConvertError, match="one split") as refused:
        open_dataset(tmp_path / "splits", TEXT_SPECS)
    assert "splits/train" in refused.value.paragraph()


def test_token_labels_get_the_batch_axis_their_inputs_get(tmp_path):
    import datasets

    ids = np.arange(12, dtype=np.int64).reshape(2, 6)
    np.savez(tmp_path / "rows.npz", input_ids=ids, attention_mask=np.ones_like(ids), label=ids + 1)
    [row] = open_dataset(tmp_path / "rows.npz", TEXT_SPECS).read([1])
    assert row.feed["input_ids"].shape == row.label.shape == (1, 6) and row.label.tolist() == [list(range(7, 13))]
    datasets.Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": ids.tolist(), "labels": (ids + 1).tolist()}).save_to_disk(
        tmp_path / "tokens"
    )
    [row] = open_dataset(tmp_path / "tokens", TEXT_SPECS).read([0])
    assert row.feed["input_ids"].shape == row.label.shape == (1, 6)
    np.savez(tmp_path / "one.npz", x=np.zeros((1, 3, 8, 8), np.float32), label=np.int64(3))
    [one] = open_dataset(tmp_path, IMAGE_SPECS).read([0])
    assert one.label.tolist() == [3]


def test_the_choice_of_samples_is_seeded_and_sorted():
    assert chosen_indices(10, None, 0) == list(range(10)) and chosen_indices(10, 20, 0) == list(range(10))
    chosen = chosen_indices(1000, 5, 3)
    assert chosen == sorted(chosen) == chosen_indices(1000, 5, 3) != chosen_indices(1000, 5, 4) and len(set(chosen)) == 5


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: np.savez(p / "d.npz", y=np.zeros((4, 3, 8, 8), np.float32)), "no array for the input x"),
        (
            lambda p: np.savez(p / "d.npz", x=np.zeros((4, 3, 8, 8), np.float32), label=np.zeros(3, np.int64)),
            "different numbers of samples",
        ),
        (lambda p: np.savez(p / "d.npz", x=np.zeros((4, 3, 9, 9), np.float32)), "does not fit the model"),
        (lambda p: np.savez(p / "d.npz", x=np.zeros((4, 3, 8, 8), np.float32), label=np.zeros(4, np.float32)), "not class or token ids"),
        (lambda p: (p / "d.npz").write_text("not a zip"), "cannot read"),
        (lambda p: (p / "d.npz").mkdir(), "holds no .npz files"),
        (lambda p: _truncated(p / "d.npz"), "truncated"),
        (lambda p: np.savez(p / "d.npz", x=np.zeros((4, 3, 8, 8), np.float32), target=np.zeros(4, np.int64)), "no column or array lbl"),
    ],
)
def test_bad_data_is_a_clear_error(tmp_path, make, message):
    make(tmp_path)
    with pytest.raises(ConvertError, match=message):
        list(open_dataset(tmp_path / "d.npz", IMAGE_SPECS, {"label": "lbl"} if "lbl" in message else None).read([0, 3]))


def _truncated(path: Path) -> None:
    """An .npz whose x.npy member says 4 rows and holds 2 (stored, so the archive still opens)."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (4, 3, 8, 8)}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive, archive.open("x.npy", "w") as stream:
        np.lib.format.write_array_header_2_0(stream, header)
        stream.write(np.zeros((2, 3, 8, 8), np.float32).tobytes())


def test_an_image_folder_refuses_a_preprocessing_that_does_not_fit_the_input(images):
    with pytest.raises(ConvertError, match="2 mean values for an image of 3 channels"):
        open_dataset(images[0], IMAGE_SPECS, preprocess=parse_preprocess("mean=0.5,0.5"))
    with pytest.raises(ConvertError, match="not a float image"):
        open_dataset(images[0], parse_input_specs(("x:uint8[B,3,8,8]",)))


@pytest.mark.parametrize("text", ["size=abc", "size=0x4", "std=0", "layout=CHW", "colour=1"])
def test_a_bad_preprocessing_spec_is_a_clear_error(text):
    with pytest.raises(ConvertError, match="cannot read the preprocessing spec"):
        parse_preprocess(text)


def _write_large_npz(path: Path, rows: int, row_shape: tuple[int, ...]) -> None:
    """An .npz of float32 rows written a piece at a time (this process never holds it either)."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (rows, *row_shape)}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as stream:
            np.lib.format.write_array_header_2_0(stream, header)
            piece = np.ones((1024, *row_shape), np.float32)
            for start in range(0, rows, 1024):
                stream.write((piece[: min(1024, rows - start)] * start).tobytes())
        archive.writestr("label.npy", _npy(np.arange(rows) % 10))


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_a_dataset_larger_than_the_process_memory_is_read_without_loading_it_whole(tmp_path):
    rows, row_shape = 1536, (3, 256, 256)  # 1.1 GiB of float32
    _write_large_npz(tmp_path / "large.npz", rows, row_shape)
    assert (tmp_path / "large.npz").stat().st_size > 1.1 * 2**30
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (768 * 2**20, 768 * 2**20))\n"
    read = f"""
import json
from pathlib import Path
from convert.datasets import chosen_indices, open_dataset
from convert.specs import parse_input_specs
dataset = open_dataset(Path({str(tmp_path / "large.npz")!r}), parse_input_specs(("x:float32[B,3,256,256]",)))
indices = chosen_indices(dataset.size, 16, 0)
seen = [(s.index, float(s.feed["x"][0, 0, 0, 0]), int(s.label[0])) for s in dataset.read(indices)]
print(json.dumps({{"size": dataset.size, "seen": seen}}))
"""
    done = _python(limit + read)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["size"] == rows and len(found["seen"]) == 16
    # every row holds the first index of its piece of 1024 rows, and every label its index mod 10
    assert all(value == (index // 1024) * 1024 and label == index % 10 for index, value, label in found["seen"])
    # the limit is real: loading the array whole under it fails
    whole = _python(limit + f"import numpy; numpy.load({str(tmp_path / 'large.npz')!r})['x']")
    assert whole.returncode != 0 and "MemoryError" in whole.stderr


def _python(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
