"""JAX as the localisation of a jax2onnx export sees it: the program's equations run one by one, matched with the
ONNX graph's nodes by the source line that called them (jax2onnx writes it on every node as ``pkg.jax2onnx.callsite``,
``Class.method:line``, when its stack-trace metadata is on, as this tool's exporter turns it); and the program as it was
captured, traced at the export's symbolic shapes, its module calls beside those of the program traced at the concrete
shapes."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from convert.errors import ConvertError

CALLSITE_KEY = "pkg.jax2onnx.callsite"
STACKTRACE_ENV = "JAX2ONNX_ENABLE_STACKTRACE_METADATA"


class TracedJaxpr:
    method = "the JAX program's equations run one by one, matched with jax2onnx's nodes by the source line that called them"
    # A JAX program is captured at the export's symbolic shapes: a model that specialises on a concrete size (``if
    # x.shape[0] == 1``) takes the other branch there, which the reference (jitted at the concrete shapes) does not.

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

    def outputs(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs as the exporter captured it: traced at the export's symbolic shapes, run at the feed's."""
        outputs = _run_with(self._symbolic(), [], self._arrays(feed), self.source.symbolic_specs())
        return {name: np.asarray(value) for name, value in named_outputs(_unflattened(self.source, feed, outputs)).items()}

    def module_outputs(self, feed: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Each module call's result (a ``__call__`` in the equations' tracebacks, told apart by the lines that called
        it) in the program traced at the feed's shapes, beside the same call's in the program traced at the export's
        symbolic shapes, both run at the feed, in the order the calls finish. A call that gives more than one value to
        the rest of the program, or that only one of the two programs makes, is left out."""
        import jax

        arrays = self._arrays(feed)
        concrete_program, symbolic_program = jax.make_jaxpr(self.source.bound())(*arrays), self._symbolic()
        concrete, symbolic = _module_calls(concrete_program), _module_calls(symbolic_program)
        shared = [call for call in concrete if call in symbolic]
        expected = _run_with(concrete_program, [concrete[call][1] for call in shared], arrays)
        actual = _run_with(symbolic_program, [symbolic[call][1] for call in shared], arrays, self.source.symbolic_specs())
        return [
            (concrete[call][0], np.asarray(left), np.asarray(right))
            for call, left, right in zip(shared, expected, actual)
            if np.shape(left) == np.shape(right)
        ]

    def _arrays(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [feed[spec.name] for spec in self.source.signature.inputs]

    def _symbolic(self):
        import jax

        return jax.make_jaxpr(self.source.bound())(*self.source.symbolic_specs())


@contextlib.contextmanager
def x64_mode_within() -> Iterator[None]:
    """JAX's 64-bit mode on inside, and afterwards the mode the process had. litert-torch's JAX bridge needs it and
    turns it on for the whole process when it is imported: a JAX model converted later in the same process (the Python
    API, --no-isolation) would compute in float64 where its source computes in float32."""
    import jax

    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def named_outputs(outputs: Any) -> dict[str, Any]:
    """Name every array a JAX model returns, in JAX's own flattening order (the order exporters see):
    dict keys and attributes joined by dots, ``output_K`` for the K-th element of a returned tuple, ``output`` for one array."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(outputs)[0]
    named: dict[str, Any] = {}
    for path, leaf in leaves:
        if not hasattr(leaf, "shape"):
            raise ConvertError(
                f"the model returns a {type(leaf).__name__}, which is not an array",
                "Return arrays (alone, or in tuples, lists or dicts) from the model.",
            )
        parts = [key_name(key) for key in path]
        if parts and isinstance(path[0], jax.tree_util.SequenceKey):
            parts[0] = f"output_{parts[0]}"
        named[".".join(parts) or "output"] = leaf
    return named


def key_name(key: Any) -> str:
    """A pytree key's own name: a dict key, an attribute, or a sequence index."""
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _run_with(closed, extra: list, arrays: list[np.ndarray], specs: list | None = None) -> list:
    """The program's outputs, or the ``extra`` values it makes where there are any, run on the arrays: compiled for
    ``specs`` where given (symbolic shapes, through jax.export, which binds them to the arrays' sizes). The program's
    constants (the params it closes over) are passed as arguments, not compiled in as constants of the module."""
    import jax
    from jax.extend import core

    jaxpr = closed.jaxpr
    opened = jaxpr.replace(constvars=[], invars=[*jaxpr.constvars, *jaxpr.invars], outvars=[*jaxpr.outvars, *extra])
    function = jax.jit(core.jaxpr_as_fun(core.ClosedJaxpr(opened, [])))
    if specs is None:
        values = function(*closed.consts, *arrays)
    else:
        constants = [jax.ShapeDtypeStruct(np.shape(c), c.dtype) for c in closed.consts]
        values = jax.export.export(function)(*constants, *specs).call(*closed.consts, *arrays)
    return list(values)[len(jaxpr.outvars) :] if extra else list(values)


def _unflattened(source, feed: dict[str, np.ndarray], leaves: list):
    """The program's flat outputs in the structure the model returns them in."""
    import jax

    structure = jax.tree.structure(jax.eval_shape(source.bound(), *[feed[s.name] for s in source.signature.inputs]))
    return jax.tree.unflatten(structure, leaves)


def _module_calls(closed) -> dict[tuple, tuple[str, object]]:
    """Each module call of the program, by (its chain of calling lines, which of its runs): its label and the one value
    it gives to the rest of the program, in the order the calls finish. A call is a ``__call__`` frame of the
    equations' user tracebacks (frames of this package left out); its run is the equations in a row inside it."""
    from jax._src import source_info_util

    runs: dict[tuple, int] = defaultdict(int)  # a chain → how many runs of it so far
    current: dict[tuple, tuple] = {}  # a chain open at the previous equation → its call
    calls: dict[tuple, dict] = {}
    for index, eqn in enumerate(closed.jaxpr.eqns):
        frames = [f for f in source_info_util.user_frames(eqn.source_info.traceback) if not f.file_name.startswith(_PACKAGE)]
        chain = frames[::-1]  # outermost first
        open_now: dict[tuple, tuple] = {}
        for depth, frame in enumerate(chain):
            if not frame.function_name.endswith("__call__"):
                continue
            key = (*((f.file_name, f.function_name, f.start_line) for f in chain[:depth]), (frame.file_name, frame.function_name))
            call = current.get(key)
            if call is None:
                call = (key, runs[key])
                runs[key] += 1
                caller = chain[depth - 1] if depth else None
                label = frame.function_name + (f" (called at {caller.function_name}, line {caller.start_line})" if caller else "")
                calls[call] = {"label": label, "made": set(), "read_after": [], "last": index}
            open_now[key] = call
            calls[call]["made"].update(v for v in eqn.outvars if type(v).__name__ != "DropVar")
            calls[call]["last"] = index
        for value in eqn.invars:
            if _hashable(value):
                for call, found in calls.items():
                    if call not in open_now.values() and value in found["made"] and value not in found["read_after"]:
                        found["read_after"].append(value)
        current = open_now
    for value in closed.jaxpr.outvars:
        for found in calls.values():
            if _hashable(value) and value in found["made"] and value not in found["read_after"]:
                found["read_after"].append(value)
    ordered = sorted(calls.items(), key=lambda item: item[1]["last"])
    return {call: (found["label"], found["read_after"][0]) for call, found in ordered if len(found["read_after"]) == 1}


_PACKAGE = str(Path(__file__).resolve().parents[1])


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
