"""What the layers (sources, exporters, optimizers, runtimes) share, one module per technology: torch, tf, onnx,
openvino, tensorrt. The layers import these and never each other; a backend imports its framework inside the
functions that need it, so that importing one (and ``import convert``) loads no framework."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Keep what native libraries write to file descriptor 2 off the user's terminal (TensorFlow's C++ side on import,
    ExecuTorch's cpuinfo probing, torchao's optional kernels that do not load on this machine)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
