"""Unit tests of what the user names before any framework is imported: input specs, --dim and --shape-range
(convert/specs.py), factory references and example inputs (convert/sources/request.py), and telling a model file's
framework from its bytes and suffix (convert/sources/resolve.py). No framework is imported here."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from convert.errors import ConvertError
from convert.sources.base import example_arrays
from convert.sources.request import SourceRequest, anchored_reference, is_factory_reference, load_example_inputs, split_reference
from convert.sources.resolve import detect_framework, resolve_source
from convert.specs import DTYPES, InputSpec, SourceSignature, parse_dim_sizes, parse_input_specs, parse_shape_ranges

# parse_input_specs


def test_a_spec_gives_name_dtype_dims_and_symbols():
    [spec] = parse_input_specs(["pixel_values:float16[B,3,H,W]"])
    assert spec == InputSpec(name="pixel_values", dtype="float16", dims=("B", 3, "H", "W"))
    assert spec.symbols == ("B", "H", "W") and not spec.is_integer
    assert spec.shape({"B": 2, "H": 5, "W": 7}) == (2, 3, 5, 7)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_listed_dtype_is_read(dtype):
    [spec] = parse_input_specs([f"x:{dtype}[4]"])
    assert spec.dtype == dtype and spec.dims == (4,)
    assert spec.is_integer == dtype.startswith(("int", "uint"))


def test_specs_keep_their_order_and_share_symbols():
    specs = parse_input_specs(["input_ids:int64[B,S]{0..30521}", "attention_mask:int64[B,S]{0..1}", "scale:float32[]"])
    assert [s.name for s in specs] == ["input_ids", "attention_mask", "scale"]
    assert SourceSignature(inputs=specs).symbols == ("B", "S")
    assert specs[2].dims == () and specs[2].shape({}) == ()


def test_spaces_around_the_parts_are_allowed():
    [spec] = parse_input_specs(["  ids : int32 [ B , 8 ] { 0 .. 9 }  "])
    assert (spec.name, spec.dtype, spec.dims, spec.low, spec.high) == ("ids", "int32", ("B", 8), 0.0, 9.0)


def test_a_value_domain_is_read_as_numbers_and_printed_back():
    [ids, x, mask] = parse_input_specs(["ids:int64[B]{-5..5}", "x:float32[B]{-0.5..1e3}", "mask:bool[B]{0..1}"])
    assert (ids.low, ids.high) == (-5.0, 5.0)
    assert (x.low, x.high) == (-0.5, 1000.0)
    assert (mask.low, mask.high) == (0.0, 1.0)
    assert [str(s) for s in (ids, x, mask)] == ["ids:int64[B]{-5..5}", "x:float32[B]{-0.5..1000}", "mask:bool[B]{0..1}"]


def test_a_spec_without_a_domain_has_none():
    [spec] = parse_input_specs(["x:float32[B,4]"])
    assert spec.low is None and spec.high is None and str(spec) == "x:float32[B,4]"


def test_names_may_hold_dots_slashes_and_dashes():
    [spec] = parse_input_specs(["encoder/input-0.x:float32[B]"])
    assert spec.name == "encoder/input-0.x"


def test_one_value_bool_domains_are_all_false_or_all_true():
    assert [(s.low, s.high) for s in parse_input_specs(["a:bool[B]{0..0}", "b:bool[B]{1..1}"])] == [(0, 0), (1, 1)]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("x:float8[B]", "has an unknown dtype 'float8'"),
        ("x float32[B]", "cannot read the input spec"),
        ("x:float32(B)", "cannot read the input spec"),
        ("x:float32[B,0]", "has a dim of size 0"),
        ("x:float32[B+1]", "has a dim 'B+1' that is neither a positive integer, a symbol nor a sum of symbols"),
        ("x:float32[B,]", "has a dim '' that is neither a positive integer, a symbol nor a sum of symbols"),
        ("ids:int64[B]{0..2.5}", "gives a fractional domain to an integer input"),
        ("ids:int64[B]{5..1}", "has an empty value domain"),
        ("x:float32[B]{1..1}", "has an empty value domain"),
        ("mask:bool[B]{0..2}", "gives a bool input a domain outside 0..1"),
        ("x:float32[B]{0,1}", "has a value domain that is not low..high"),
    ],
)
def test_a_bad_spec_is_an_error_naming_the_spec_and_what_is_wrong(text, problem):
    with pytest.raises(ConvertError) as info:
        parse_input_specs(["ok:float32[B]", text])
    assert problem in info.value.problem
    assert repr(text) in info.value.problem
    assert info.value.next_step  # every error says what to do next


def test_the_syntax_help_lists_every_dtype():
    with pytest.raises(ConvertError) as info:
        parse_input_specs(["x:complex64[B]"])
    assert all(dtype in info.value.next_step for dtype in DTYPES)
    assert "name:dtype[dims]{low..high}" in info.value.next_step


def test_an_input_given_twice_is_an_error_naming_it():
    with pytest.raises(ConvertError) as info:
        parse_input_specs(["x:float32[B]", "y:float32[B]", "x:float32[B,2]"])
    assert info.value.problem == "the input 'x' is given more than once"


def test_a_spec_that_is_not_text_is_an_error():
    with pytest.raises(ConvertError, match="input spec 3 is not text"):
        parse_input_specs([3])


def test_no_specs_is_no_inputs():
    assert parse_input_specs([]) == ()


# parse_dim_sizes and parse_shape_ranges


def test_dim_sizes_keep_the_export_size_first():
    assert parse_dim_sizes(["B=2,1,8", " S =16"]) == {"B": (2, 1, 8), "S": (16,)}
    assert parse_dim_sizes([]) == {}


@pytest.mark.parametrize("text", ["B", "B=", "B=0", "B=2,-1", "B=x", "2B=4", "B=2,,3", "=4"])
def test_bad_dim_sizes_are_an_error_naming_them(text):
    with pytest.raises(ConvertError) as info:
        parse_dim_sizes(["S=3", text])
    assert info.value.problem == f"cannot read the dim sizes {text!r}"
    assert "--dim B=2,1,8" in info.value.next_step


def test_shape_ranges_give_min_opt_max_per_symbol():
    assert parse_shape_ranges(["B=1..8..32,S=16..128..512"]) == {"B": (1, 8, 32), "S": (16, 128, 512)}


def test_a_shape_range_without_opt_takes_the_max_as_opt():
    assert parse_shape_ranges(["B=1..8"]) == {"B": (1, 8, 8)}


def test_shape_ranges_from_several_options_merge_and_empty_items_are_ignored():
    assert parse_shape_ranges(["B=1..4,", " S = 2..3..9 "]) == {"B": (1, 4, 4), "S": (2, 3, 9)}


@pytest.mark.parametrize("item", ["B=8..1", "B=0..4", "B=1..9..4", "B=1..2..3..4", "B=4", "B", "B=a..b", "1B=1..2"])
def test_a_bad_shape_range_is_an_error_naming_that_item(item):
    with pytest.raises(ConvertError) as info:
        parse_shape_ranges([f"S=1..4,{item}"])
    assert info.value.problem == f"cannot read the shape range {item!r}"
    assert "1 <= MIN <= OPT <= MAX" in info.value.next_step


# factory references


@pytest.mark.parametrize(
    "text",
    [
        "fixtures.torch_models:build_cnn",
        "models:build",
        "nets:Zoo.resnet",
        "path/to/file.py:build",
        "file.py:Model",
        "C:\\models\\nets.py:build",
        "run:3/nets.py:build",  # a folder with a colon in its name: the split is on the last ':'
    ],
)
def test_a_module_or_python_file_with_a_callable_is_a_factory_reference(text):
    assert is_factory_reference(text)


@pytest.mark.parametrize(
    "text",
    [
        "models/cnn.pt2",
        "out/run:3/model.pt2",  # a file path with a colon in a folder name
        "C:\\models\\model.pt2",
        "model.pt2",
        "pkg.mod:",
        ":build",
        "pkg.mod:3build",
        "my-package.mod:build",
    ],
)
def test_a_file_path_or_a_broken_reference_is_no_factory_reference(text):
    assert not is_factory_reference(text)


def test_a_reference_splits_on_the_last_colon():
    assert split_reference("C:\\models\\nets.py:build") == ("C:\\models\\nets.py", "build")
    assert split_reference("pkg.models:Net.build") == ("pkg.models", "Net.build")
    assert split_reference("models/cnn.pt2") is None


def test_a_reference_in_a_file_is_anchored_to_that_files_folder(tmp_path):
    folder = tmp_path / "policies"
    assert anchored_reference("nets/zoo.py:build", folder) == f"{folder / 'nets/zoo.py'}:build"
    assert anchored_reference("fixtures.torch_models:build_cnn", folder) == "fixtures.torch_models:build_cnn"
    assert anchored_reference("models/cnn.pt2", folder) == str(folder / "models/cnn.pt2")
    assert anchored_reference("/abs/cnn.pt2", folder) == "/abs/cnn.pt2"


# example inputs


def test_example_inputs_are_read_from_an_npz_by_name(tmp_path):
    path = tmp_path / "example.npz"
    np.savez(path, x=np.arange(6, dtype=np.float32).reshape(2, 3), ids=np.array([1, 2], dtype=np.int64))
    arrays = load_example_inputs(path)
    assert sorted(arrays) == ["ids", "x"]
    assert arrays["x"].dtype == np.float32 and arrays["x"].shape == (2, 3)


def test_missing_empty_or_pickled_example_inputs_are_errors(tmp_path):
    with pytest.raises(ConvertError, match="does not exist"):
        load_example_inputs(tmp_path / "missing.npz")
    np.savez(tmp_path / "empty.npz")
    with pytest.raises(ConvertError, match="holds no arrays"):
        load_example_inputs(tmp_path / "empty.npz")
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ConvertError, match="of Python objects: a pickle, which is never loaded"):
        load_example_inputs(tmp_path / "objects.npz")


# example_arrays (convert/sources/base.py): every source's example inputs as named arrays


class _Tensor:
    """A framework's tensor, as far as example_arrays sees one: only its source's conversion reads it."""

    def __init__(self, values):
        self.values = values


def _converted(value):
    return np.asarray(value.values, dtype=np.float32) * 10 if isinstance(value, _Tensor) else np.asarray(value)


def test_no_example_inputs_give_none():
    assert example_arrays(None, ["x"]) is None and example_arrays(None, None, _converted) is None


def test_example_inputs_by_name_keep_their_names_and_go_through_the_conversion():
    arrays = example_arrays({"b": _Tensor([1.0]), "a": [1, 2]}, ["a", "b"], _converted)
    assert list(arrays) == ["b", "a"]  # as given: the specs, not this, order the inputs
    assert arrays["b"].tolist() == [10.0] and arrays["b"].dtype == np.float32
    assert arrays["a"].tolist() == [1, 2] and isinstance(arrays["a"], np.ndarray)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["x", "mask", "scale"], ["x", "mask"]),  # the first names: trailing parameters keep their defaults
        (["x", "mask"], ["x", "mask"]),
        (["x"], ["input_0", "input_1"]),  # fewer names than values: none is guessed
        ([], ["input_0", "input_1"]),
        (None, ["input_0", "input_1"]),  # names not known (*args, a SavedModel signature)
    ],
)
def test_example_inputs_in_call_order_take_the_first_names(names, expected):
    arrays = example_arrays((_Tensor([1.0]), np.zeros((2, 3), np.int64)), names, _converted)
    assert list(arrays) == expected
    assert arrays[expected[0]].tolist() == [10.0] and arrays[expected[1]].shape == (2, 3)


def test_a_list_is_inputs_in_call_order_and_a_lone_value_is_one_input():
    assert list(example_arrays([np.ones(2), np.ones(3)], ["x", "y"])) == ["x", "y"]
    [(name, array)] = example_arrays(_Tensor([[1.0, 2.0]]), ["x", "y"], _converted).items()
    assert name == "x" and array.shape == (1, 2)
    assert example_arrays((), ["x"]) == {}


def test_example_inputs_by_default_are_what_numpy_reads():
    arrays = example_arrays((np.float16(1.5), [[1, 2]]), None)
    assert arrays["input_0"].dtype == np.float16 and arrays["input_0"].shape == ()
    assert arrays["input_1"].shape == (1, 2)


def test_example_inputs_from_an_npz_path_are_read_by_name(tmp_path):
    path = tmp_path / "example.npz"
    np.savez(path, ids=np.array([1, 2], dtype=np.int64))
    for given in (path, str(path)):
        arrays = example_arrays(given, ["x"], _converted)
        assert list(arrays) == ["ids"] and arrays["ids"].dtype == np.int64
    with pytest.raises(ConvertError, match="does not exist"):
        example_arrays(tmp_path / "missing.npz", None)


# the framework of a model file


def _zip(path: Path, *members: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for member in members:
            archive.writestr(member, b"{}")
    return path


def test_a_pt2_archive_is_torch(tmp_path):
    assert detect_framework(_zip(tmp_path / "m.pt2", "m/archive_format", "m/models/m.json")) == "torch"


def test_the_bytes_win_over_the_suffix(tmp_path):
    """A TorchScript archive saved as .keras is a torch model, whatever it is called."""
    assert detect_framework(_zip(tmp_path / "m.keras", "m/constants.pkl", "m/code/m.py")) == "torch"


def test_a_keras_archive_and_an_hdf5_file_are_keras(tmp_path):
    assert detect_framework(_zip(tmp_path / "m.keras", "config.json", "model.weights.h5")) == "keras"
    h5 = tmp_path / "m.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(16))
    assert detect_framework(h5) == "keras"


def test_a_legacy_torch_pickle_is_torch_whatever_its_suffix(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\x80\x02" + bytes(16))
    assert detect_framework(path) == "torch"


def test_a_saved_model_folder_is_keras(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"\x08\x01")
    assert detect_framework(tmp_path) == "keras"


def test_a_folder_with_no_model_is_an_error_saying_what_a_saved_model_holds(tmp_path):
    with pytest.raises(ConvertError) as info:
        detect_framework(tmp_path)
    assert (
        info.value.problem
        == f"{tmp_path} is a folder with no model in it (a sentence-transformers folder holds modules.json; a diffusers model folder holds "
        "config.json (with _class_name); a Hugging Face model folder holds config.json or adapter_config.json; a SavedModel "
        "folder holds saved_model.pb)"
    )


def test_a_file_of_no_known_framework_is_an_error_asking_for_framework(tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(b"\x08\x07\x12\x04test")
    with pytest.raises(ConvertError) as info:
        detect_framework(path)
    assert info.value.problem == f"cannot tell which framework {path} belongs to"
    assert info.value.next_step == "Pass --framework (torch, sentence-transformers, diffusers, transformers, keras, jax, onnx)."


def test_a_corrupt_onnx_file_is_a_clear_error(tmp_path):
    from convert.sources.request import SourceRequest
    from convert.sources.resolve import resolve_source

    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07\x12\x04test")
    with pytest.raises(ConvertError, match=r"model.onnx is not a valid ONNX model"):
        resolve_source(SourceRequest(model=str(path)))


def test_an_object_of_no_known_framework_is_an_error():
    with pytest.raises(ConvertError, match="cannot tell which framework a ndarray belongs to"):
        detect_framework(np.zeros(3))


def test_a_missing_model_is_an_error_before_any_framework_is_imported(tmp_path):
    loaded = set(sys.modules)
    with pytest.raises(ConvertError) as info:
        resolve_source(SourceRequest(model=str(tmp_path / "missing.pt2")))
    assert info.value.problem == f"the model {tmp_path / 'missing.pt2'} does not exist"
    assert not {"torch", "tensorflow", "keras", "jax"} & (set(sys.modules) - loaded)


def test_a_python_file_without_a_callable_is_an_error_suggesting_one(tmp_path):
    path = tmp_path / "nets.py"
    path.write_text("def build_model():\n    return None\n")
    with pytest.raises(ConvertError) as info:
        resolve_source(SourceRequest(model=str(path)))
    assert info.value.problem == f"{path} is Python code, not a saved model, and names no callable in it"
    assert info.value.next_step == f"Name the function or class that builds the model, e.g. {path}:build_model."
