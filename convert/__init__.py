"""Export PyTorch, Keras and JAX models, optimize them, and validate every artifact against the source.

``import convert`` imports no framework: each is imported when a model of its kind is touched.

    import convert
    result = convert.convert(module, example_inputs=(x,), to=["onnx", "torch_export"])
    result.passed, result.artifacts["onnx"].path, result.report.to_json()

    result = convert.validate("model.onnx", against=module, example_inputs=(x,))   # an artifact you already have
    verdict = convert.gate("promotion.yaml")   # the promotion gate: verdict.promoted, verdict.reasons
"""

__version__ = "0.1.0"


def _find_numerics_in_checkout() -> None:
    """Make ``convert.validators`` importable from a checkout, where it is the top-level folder validators/.

    Installed (a wheel, or pip install -e, through setuptools' package-dir mapping in pyproject.toml), the numerics
    are ``convert.validators``: the repository keeps them in validators/, which is never installed as a top-level
    ``validators`` (a PyPI package of that name). Run from a checkout (PYTHONPATH, python -m from the repository
    root), that mapping is not there, or is another checkout's: this finder, ahead of the others, takes
    validators/ next to this convert/."""
    import sys
    from importlib.machinery import PathFinder
    from pathlib import Path

    here = Path(__file__).resolve().parent
    checkout = here.parent
    if (here / "validators").is_dir():
        return  # installed from a wheel: convert/validators/ is a folder here
    if not ((checkout / "pyproject.toml").is_file() and (checkout / "validators" / "__init__.py").is_file()):
        return  # not a checkout (site-packages may hold the PyPI validators: never take that one)

    class _CheckoutNumerics:
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            return PathFinder.find_spec(fullname, [str(checkout)]) if fullname == "convert.validators" else None

    sys.meta_path.insert(0, _CheckoutNumerics)


_find_numerics_in_checkout()

from convert.errors import ConvertError  # noqa: E402

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
