"""JAX as the localisation of a jax2onnx export sees it: the program's equations run one by one, matched with the
ONNX graph's nodes by the source line that called them (jax2onnx writes it on every node as ``pkg.jax2onnx.callsite``,
``Class.method:line``, when its stack-trace metadata is on, as this tool's exporter turns it)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

CALLSITE_KEY = "pkg.jax2onnx.callsite"
STACKTRACE_ENV = "JAX2ONNX_ENABLE_STACKTRACE_METADATA"


class TracedJaxpr:
    method = "the JAX program's equations run one by one, matched with jax2onnx's nodes by the source line that called them"

    def __init__(self, source):
        self.source = source
        self.by_value: dict[str, str] = {}  # the graph's value → the call site whose result it is

    def names(self, graph) -> dict[str, str]:
        """Each call site's result in the graph (the one value its nodes give to other call sites), by value."""
        boundaries = _boundaries(
            [(_callsite(node), list(node.input), list(node.output)) for node in graph.node], [o.name for o in graph.output]
        )
        self.by_value = {values[0]: site for site, values in boundaries.items() if len(values) == 1}
        return {value: "{}, line {}".format(*site.rsplit(":", 1)) for value, site in self.by_value.items()}

    def values(self, feed: dict[str, np.ndarray], names: list[str], budget_bytes: int) -> dict[str, np.ndarray]:
        """The named values for one feed: each call site's result, the program evaluated equation by equation."""
        import jax

        arrays = [feed[spec.name] for spec in self.source.signature.inputs]
        closed = jax.make_jaxpr(self.source.bound())(*arrays)
        sites = set(self.by_value.values())
        equations = [(_site_of(eqn, sites), eqn.invars, eqn.outvars) for eqn in closed.jaxpr.eqns]
        results = {site: values[0] for site, values in _boundaries(equations, closed.jaxpr.outvars).items() if len(values) == 1}
        wanted = {results[self.by_value[name]]: name for name in names if self.by_value.get(name) in results}
        found: dict[str, np.ndarray] = {}
        taken = 0
        environment = dict(zip(closed.jaxpr.constvars, closed.consts))
        environment.update(zip(closed.jaxpr.invars, arrays))
        for eqn in closed.jaxpr.eqns:
            inputs = [v.val if type(v).__name__ == "Literal" else environment[v] for v in eqn.invars]
            with eqn.ctx.manager:  # as jax.core.eval_jaxpr runs an equation
                out = eqn.primitive.bind(*inputs, **eqn.primitive.get_bind_params(eqn.params))
            for var, value in zip(eqn.outvars, out if eqn.primitive.multiple_results else [out]):
                environment[var] = value
                if var in wanted:
                    array = np.asarray(value)
                    if found and taken + array.nbytes > budget_bytes:
                        return found
                    found[wanted[var]], taken = array, taken + array.nbytes
        return found


def _callsite(node) -> str:
    return next((p.value for p in node.metadata_props if p.key == CALLSITE_KEY), "")


def _site_of(eqn, sites: set[str]) -> str:
    """The innermost frame of an equation's traceback that is one of the graph's call sites."""
    traceback = eqn.source_info.traceback
    for frame in traceback.frames if traceback is not None else ():
        name = f"{frame.function_name}:{frame.line_num}"
        if name in sites:
            return name
    return ""


def _boundaries(steps, outputs) -> dict[str, list]:
    """Per call site, the values its steps make that a step of another site reads, or that are outputs."""
    site_of = {}
    for site, _, made in steps:
        for value in made:
            site_of[value] = site
    crossing: dict[str, list] = defaultdict(list)
    for site, read, _ in steps:
        for value in read:
            made_at = site_of.get(value) if _hashable(value) else None
            if made_at and made_at != site and value not in crossing[made_at]:
                crossing[made_at].append(value)
    for value in outputs:
        made_at = site_of.get(value) if _hashable(value) else None
        if made_at and value not in crossing[made_at]:
            crossing[made_at].append(value)
    return {site: values for site, values in crossing.items() if site}


def _hashable(value) -> bool:
    return type(value).__name__ != "Literal"
