"""Export PyTorch, Keras and JAX models, optimize them, and validate every artifact against the source.

``import convert`` imports no framework: each is imported when a model of its kind is touched.

    import convert
    result = convert.convert(module, example_inputs=(x,), to=["onnx", "torch_export"])
    result.passed, result.artifacts["onnx"].path, result.report.to_json()

    result = convert.validate("model.onnx", against=module, example_inputs=(x,))   # an artifact you already have
    verdict = convert.gate("promotion.yaml")   # the promotion gate: verdict.promoted, verdict.reasons
"""

__version__ = "0.1.0"

from convert.errors import ConvertError

__all__ = ["convert", "validate", "load", "gate", "ConvertError", "Report", "Verdict", "__version__"]


def __getattr__(name: str):
    # The API pulls in the pipeline; load it on first use so that light imports (errors, specs) stay light.
    if name in ("convert", "validate", "load"):
        from convert import api

        return getattr(api, name)
    if name == "gate":
        import convert.gate  # a package that is callable as the gate itself

        return convert.gate
    if name in ("Report", "Verdict"):
        from convert.reports import model

        return getattr(model, name)
    raise AttributeError(f"module 'convert' has no attribute {name!r}")
