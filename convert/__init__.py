"""Export PyTorch, Keras and JAX models, optimize them, and validate every artifact against the source.

``import convert`` imports no framework: each is imported when a model of its kind is touched.

    import convert
    result = convert.convert(module, example_inputs=(x,), to=["onnx", "torch_export"])
    result.passed, result.artifacts["onnx"].path, result.report.to_json()
"""

__version__ = "0.1.0"

from convert.api import convert, load  # noqa: E402
from convert.errors import ConvertError  # noqa: E402
from convert.reports.model import Report  # noqa: E402

__all__ = ["convert", "load", "ConvertError", "Report", "__version__"]
