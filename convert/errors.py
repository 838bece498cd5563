"""The two error tiers: a user error exits 2 with one clear paragraph; anything else is internal (exit 3).

Besides them, ``ArtifactUnsupported``: a runtime cannot run an artifact at all, and its checks are skipped with the reason.
"""

from __future__ import annotations


class ConvertError(Exception):
    """A problem with the user's model, input or options: shown as one paragraph, never a traceback.

    ``problem`` says what is wrong; ``next_step`` says what to do about it.
    """

    exit_code = 2

    def __init__(self, problem: str, next_step: str = ""):
        self.problem = problem.strip()
        self.next_step = next_step.strip()
        super().__init__(self.paragraph())

    def paragraph(self) -> str:
        text = self.problem
        if self.next_step:
            text = f"{text.rstrip('.')}. {self.next_step}"
        return text


class MissingDependency(ConvertError):
    """An optional framework or runtime is not installed."""

    def __init__(self, package: str, purpose: str):
        from convert.registry import REGISTRY

        extra = REGISTRY.extra_of(package)  # the registry declares each package with the extra that installs it
        super().__init__(
            f"{purpose} needs the Python package '{package}', which is not installed",
            f"Install it with: pip install 'model-convert[{extra}]'",
        )


def require(module: str, purpose: str):
    """Import an optional dependency or raise a MissingDependency naming the extra that installs it (the registry's)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(module.split(".")[0], purpose) from exc


class ArtifactUnsupported(Exception):
    """This runtime, as installed here, cannot run this artifact at all (its checks are skipped with the reason)."""
