"""The promotion gate (``convert gate``, ``convert.gate``): run the pipeline a policy describes and judge the report
against it.

    run.py       runs the conversion for a policy with the gate's hooks, and publishes the renderings
    judge.py     the verdict: a pure function of the report, the policy and the baseline report
    budgets.py   latency, throughput, accuracy and size budgets (timed figures judged on their 95% interval)
    baseline.py  loading a baseline report, and comparing the run's report with it

``convert.gate`` is this package, and calling it runs the gate: ``convert.gate("promotion.yaml")`` is
``convert.gate.run.gate("promotion.yaml")``. The package imports nothing until it is called or a module is asked for.
"""

from __future__ import annotations

import sys
import types


class _Gate(types.ModuleType):
    """The package, callable as the gate itself (``convert.gate(policy, ...)``, the public API)."""

    def __call__(self, *args, **keywords):
        from convert.gate.run import gate

        return gate(*args, **keywords)


sys.modules[__name__].__class__ = _Gate
