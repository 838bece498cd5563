"""What the layers (sources, exporters, optimizers, runtimes) share, one module per technology: torch, tf, onnx,
openvino, tensorrt. The layers import these and never each other; a backend imports its framework inside the
functions that need it, so that importing one (and ``import convert``) loads no framework."""
