"""Source adapters: one per framework. Each turns what the user gave into a SourceModel.

A folder is told apart by a marker file (and, where two sources share one, a top-level key of that JSON file): the
first source whose marker the folder holds loads it, so the more specific folders come first."""

from convert.registry import CORE_EXTRA, REGISTRY, SourceSpec

_HUGGING_FACE_FOLDER = dict(framework_import="convert.backends.torch:require_torch", suffixes=(), modules=(), takes_callables=False)

for spec in (
    SourceSpec(
        name="torch",
        target="convert.sources.torch:load_torch_source",
        extra="torch",
        packages=("torch", "safetensors"),
        modules=("torch",),
        framework_import="convert.backends.torch:require_torch",
        suffixes=(".pt", ".pth", ".pt2", ".ts", ".jit", ".bin"),
        folder_markers=(),
        folder_key=None,
        folder_name="",
        takes_callables=False,
        loading_packages=(),
    ),
    SourceSpec(
        name="sentence-transformers",
        target="convert.sources.sentence_transformers:load_sentence_transformers_source",
        extra="sentence-transformers",
        packages=("torch", "transformers", "sentence_transformers", "safetensors"),
        folder_markers=("modules.json",),
        folder_key=None,
        folder_name="a sentence-transformers folder",
        loading_packages=(),
        **_HUGGING_FACE_FOLDER,
    ),
    SourceSpec(
        name="diffusers",
        target="convert.sources.diffusers:load_diffusers_source",
        extra="diffusers",
        packages=("torch", "diffusers", "safetensors"),
        # installed or not, each changes how from_pretrained loads a folder (accelerate: where weights are materialised
        # and which error a resized weight raises)
        loading_packages=("accelerate", "huggingface_hub"),
        folder_markers=("config.json",),
        folder_key="_class_name",
        folder_name="a diffusers model folder",
        **_HUGGING_FACE_FOLDER,
    ),
    SourceSpec(
        name="transformers",
        target="convert.sources.transformers:load_transformers_source",
        extra="transformers",
        packages=("torch", "transformers", "safetensors"),
        # installed or not, each changes what from_pretrained makes of a folder: PEFT loads an adapter_config.json's
        # adapter into the model, accelerate places and materialises the weights, huggingface_hub resolves its files
        loading_packages=("peft", "accelerate", "huggingface_hub"),
        # a PEFT adapter saved alone holds adapter_config.json, and names its base model there
        folder_markers=("config.json", "adapter_config.json"),
        folder_key=None,
        folder_name="a Hugging Face model folder",
        **_HUGGING_FACE_FOLDER,
    ),
    SourceSpec(
        name="keras",
        target="convert.sources.keras:load_keras_source",
        extra="tensorflow",
        packages=("tensorflow", "keras"),
        modules=("keras", "tensorflow"),
        framework_import="convert.backends.tf:keras",
        suffixes=(".keras", ".h5", ".hdf5"),
        folder_markers=("saved_model.pb",),
        folder_key=None,
        folder_name="a SavedModel folder",
        takes_callables=False,
        loading_packages=(),
    ),
    SourceSpec(
        name="jax",
        target="convert.sources.jax:load_jax_source",
        extra="jax",
        packages=("jax", "jaxlib", "flax", "equinox", "safetensors"),
        modules=("jax", "jaxlib", "flax", "equinox"),
        framework_import=None,
        suffixes=(),
        folder_markers=(),
        folder_key=None,
        folder_name="",
        takes_callables=True,
        loading_packages=(),
    ),
    SourceSpec(
        name="onnx",
        target="convert.sources.onnx:load_onnx_source",
        extra=CORE_EXTRA,
        packages=(),
        modules=("onnx",),
        framework_import=None,
        suffixes=(".onnx",),
        folder_markers=(),
        folder_key=None,
        folder_name="",
        takes_callables=False,
        loading_packages=(),
    ),
):
    REGISTRY.add(spec)
