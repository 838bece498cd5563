"""The artifact formats: what is true of each wherever the pipeline meets one (convert/registry.py ``FormatSpec``)."""

from convert.registry import REGISTRY, FormatSpec

IR_NAME = "model.xml"  # the model file in an OpenVINO IR folder (beside it, model.bin)

REGISTRY.add(
    FormatSpec(
        name="onnx",
        title="an ONNX model",
        suffix=".onnx",
        given_suffixes=(".onnx",),
        given_folder_marker=None,
        given_detect=None,
        given_refusal=None,
        loading_runs_code="",
        runs_code_check=None,
        external_data="convert.backends.onnx:check_external_data",
        companion_suffixes=(".data",),
        output_names="convert.backends.onnx:output_names",
        repair_output_dims="convert.validation:name_onnx_output_dims",
        localizable=True,
    )
)
REGISTRY.add(
    FormatSpec(
        name="torchscript",
        title="a TorchScript archive",
        suffix=".torchscript.pt",
        given_suffixes=(),
        given_folder_marker=None,
        given_detect="convert.safety:is_torchscript",
        given_refusal=None,
        loading_runs_code="it is TorchScript, whose code runs when it loads",
        runs_code_check=None,
        external_data=None,
        companion_suffixes=(),
        output_names=None,
        repair_output_dims=None,
        localizable=False,
    )
)
REGISTRY.add(
    FormatSpec(
        name="torch_export",
        title="a torch.export program",
        suffix=".pt2",
        given_suffixes=(".pt2",),
        given_folder_marker=None,
        given_detect=None,
        given_refusal=None,
        loading_runs_code="",
        runs_code_check="convert.backends.torch:pt2_code_reasons",
        external_data=None,
        companion_suffixes=(),
        output_names=None,
        repair_output_dims=None,
        localizable=False,
    )
)
REGISTRY.add(
    FormatSpec(
        name="savedmodel",
        title="a SavedModel",
        suffix="_savedmodel",
        given_suffixes=(),
        given_folder_marker="saved_model.pb",
        given_detect=None,
        given_refusal=None,
        loading_runs_code="it is a SavedModel, whose graph can run any TensorFlow op, file access included",
        runs_code_check=None,
        external_data=None,
        companion_suffixes=(),
        output_names=None,
        repair_output_dims=None,
        localizable=False,
    )
)
REGISTRY.add(
    FormatSpec(
        name="tflite",
        title="a TFLite model",
        suffix=".tflite",
        given_suffixes=(".tflite",),
        given_folder_marker=None,
        given_detect=None,
        given_refusal=None,
        loading_runs_code="",
        runs_code_check=None,
        external_data=None,
        companion_suffixes=(),
        output_names=None,
        repair_output_dims=None,
        localizable=False,
    )
)
REGISTRY.add(
    FormatSpec(
        name="executorch",
        title="an ExecuTorch program",
        suffix=".pte",
        given_suffixes=(".pte",),
        given_folder_marker=None,
        given_detect=None,
        given_refusal=None,
        loading_runs_code="",
        runs_code_check=None,
        external_data=None,
        companion_suffixes=(),
        output_names=None,
        repair_output_dims=None,
        localizable=False,
    )
)
REGISTRY.add(
    FormatSpec(
        name="openvino",
        title="an OpenVINO IR",
        suffix="_openvino",
        given_suffixes=(),
        given_folder_marker=IR_NAME,
        given_detect=None,
        given_refusal=None,
        loading_runs_code="",
        runs_code_check=None,
        external_data=None,
        companion_suffixes=(),
        output_names=None,
        repair_output_dims=None,
        localizable=True,  # through the ONNX graph the IR was converted from
    )
)
REGISTRY.add(
    FormatSpec(
        name="tensorrt",
        title="a TensorRT engine",
        suffix=".engine",
        given_suffixes=(".engine", ".plan"),
        given_folder_marker=None,
        given_detect=None,
        given_refusal=(
            "deserializing an engine runs its plugins' native code",
            "Give the ONNX file it was built from, with --optimize trt to build and validate an engine here.",
        ),
        loading_runs_code="deserializing an engine runs its plugins' native code",
        runs_code_check=None,
        external_data=None,
        companion_suffixes=(),
        output_names=None,
        repair_output_dims=None,
        localizable=False,
    )
)
