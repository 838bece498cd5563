"""Source adapters: one per framework. Each turns what the user gave into a SourceModel.

``framework_import`` names the function that imports the framework a model file of that source is loaded with: a
worker started ahead of its run calls it while the pipeline plans (convert/worker.py)."""

from convert.registry import REGISTRY

REGISTRY.add(
    "source",
    "torch",
    "convert.sources.torch:load_torch_source",
    extra="torch",
    packages=("torch", "safetensors"),
    module="torch",
    framework_import="convert.backends.torch:require_torch",
    suffixes=(".pt", ".pth", ".pt2", ".ts", ".jit", ".bin"),
)
# A folder is told apart by a marker file (and, where two sources share one, a top-level key of that JSON file): the
# first entry whose marker the folder holds loads it, so the more specific folders come first.
REGISTRY.add(
    "source",
    "sentence-transformers",
    "convert.sources.sentence_transformers:load_sentence_transformers_source",
    extra="sentence-transformers",
    packages=("torch", "transformers", "sentence_transformers", "safetensors"),
    framework_import="convert.backends.torch:require_torch",
    folder_marker="modules.json",
    folder_name="a sentence-transformers folder",
)
REGISTRY.add(
    "source",
    "diffusers",
    "convert.sources.diffusers:load_diffusers_source",
    extra="diffusers",
    packages=("torch", "diffusers", "safetensors"),
    # installed or not, each changes how from_pretrained loads a folder (accelerate: where weights are materialised and
    # which error a resized weight raises)
    loading_packages=("accelerate", "huggingface_hub"),
    framework_import="convert.backends.torch:require_torch",
    folder_marker="config.json",
    folder_key="_class_name",
    folder_name="a diffusers model folder",
)
REGISTRY.add(
    "source",
    "transformers",
    "convert.sources.transformers:load_transformers_source",
    extra="transformers",
    packages=("torch", "transformers", "safetensors"),
    # installed or not, each changes what from_pretrained makes of a folder: PEFT loads an adapter_config.json's adapter
    # into the model, accelerate places and materialises the weights, huggingface_hub resolves the folder's files
    loading_packages=("peft", "accelerate", "huggingface_hub"),
    framework_import="convert.backends.torch:require_torch",
    # a PEFT adapter saved alone holds adapter_config.json, and names its base model there
    folder_marker=("config.json", "adapter_config.json"),
    folder_name="a Hugging Face model folder",
)
REGISTRY.add(
    "source",
    "keras",
    "convert.sources.keras:load_keras_source",
    extra="tensorflow",
    packages=("tensorflow", "keras"),
    module=("keras", "tensorflow"),
    framework_import="convert.backends.tf:keras",
    suffixes=(".keras", ".h5", ".hdf5"),
    folder_marker="saved_model.pb",
    folder_name="a SavedModel folder",
)
REGISTRY.add(
    "source",
    "jax",
    "convert.sources.jax:load_jax_source",
    extra="jax",
    packages=("jax", "jaxlib", "flax", "equinox", "safetensors"),
    module=("jax", "jaxlib", "flax", "equinox"),
    takes_callables=True,
)
REGISTRY.add(
    "source",
    "onnx",
    "convert.sources.onnx:load_onnx_source",
    extra="(core)",
    module="onnx",
    suffixes=(".onnx",),
)
