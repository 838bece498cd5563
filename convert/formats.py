"""The artifact formats: what is true of each wherever the pipeline meets one (convert/registry.py ``FormatSpec``).

Each spec states every fact. ``RUN_ONLY_FACTS`` names the facts of a format the tool only runs (no byte detection or
refusal, no code on load, no files beside it, no output names it reads, no repair or localisation, not a captured
program); a format
spells out where it differs."""

from convert.registry import REGISTRY, FormatSpec

IR_NAME = "model.xml"  # the model file in an OpenVINO IR folder (beside it, model.bin)

RUN_ONLY_FACTS = dict(
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
    attest=None,
    captured_program=None,
)
_FACTS = {
    "onnx": {
        "title": "an ONNX model",
        "suffix": ".onnx",
        "given_suffixes": (".onnx",),
        "external_data": "convert.backends.onnx:check_external_data",
        "companion_suffixes": (".data",),
        "output_names": "convert.backends.onnx:output_names",
        "repair_output_dims": "convert.validation:name_onnx_output_dims",
        "localizable": True,
        "attest": "convert.backends.onnx:compute_precision",
    },
    "torchscript": {
        "title": "a TorchScript archive",
        "suffix": ".torchscript.pt",
        "given_suffixes": (),
        "given_detect": "convert.safety:is_torchscript",
        "loading_runs_code": "it is TorchScript, whose code runs when it loads",
        "localizable": True,  # its submodules, each run on the inputs its eager twin received
        "captured_program": "convert.backends.torch:TracedScript.of_file",
    },
    "torch_export": {
        "title": "a torch.export program",
        "suffix": ".pt2",
        "given_suffixes": (".pt2",),
        "runs_code_check": "convert.backends.torch:pt2_code_reasons",
        "localizable": True,  # the program itself, module by module beside the source run eagerly
        "captured_program": "convert.backends.torch:TracedProgram.of_file",
    },
    "savedmodel": {
        "title": "a SavedModel",
        "suffix": "_savedmodel",
        "given_suffixes": (),
        "given_folder_marker": "saved_model.pb",
        "loading_runs_code": "it is a SavedModel, whose graph can run any TensorFlow op, file access included",
    },
    "tflite": {
        "title": "a TFLite model",
        "suffix": ".tflite",
        "given_suffixes": (".tflite",),
        "attest": "convert.backends.tf:tflite_precision",
    },
    "executorch": {
        "title": "an ExecuTorch program",
        "suffix": ".pte",
        "given_suffixes": (".pte",),
        "attest": "convert.backends.executorch:pte_precision",
    },
    "openvino": {
        "title": "an OpenVINO IR",
        "suffix": "_openvino",
        "given_suffixes": (),
        "given_folder_marker": IR_NAME,
        "localizable": True,  # through the ONNX graph the IR was converted from
        "attest": "convert.backends.openvino:compute_precision",
    },
    "tensorrt": {
        "title": "a TensorRT engine",
        "suffix": ".engine",
        "given_suffixes": (".engine", ".plan"),
        "given_refusal": (
            "deserializing an engine runs its plugins' native code",
            "Give the ONNX file it was built from, with --optimize trt to build and validate an engine here.",
        ),
        "loading_runs_code": "deserializing an engine runs its plugins' native code",
        "attest": "convert.backends.tensorrt:engine_precision",
    },
}

for name, facts in _FACTS.items():
    REGISTRY.add(FormatSpec(name=name, **{**RUN_ONLY_FACTS, **facts}))
