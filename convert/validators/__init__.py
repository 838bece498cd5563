"""Numerics: input generation, tolerances, per-output metrics and the comparison verdict. NumPy only."""

from convert.validators.compare import OutputResult, compare_outputs, merge_results
from convert.validators.inputs import ShapeCase, generate_feed, plan_shape_cases
from convert.validators.tolerances import Tolerance, TolerancePolicy, default_tolerance

__all__ = [
    "OutputResult",
    "compare_outputs",
    "merge_results",
    "ShapeCase",
    "generate_feed",
    "plan_shape_cases",
    "Tolerance",
    "TolerancePolicy",
    "default_tolerance",
]
