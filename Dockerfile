# Two images from one file. The CPU image is the default target (the last stage):
#   docker build -t model-convert .                                  (the same as --target cpu)
#   docker build --target tensorrt -t model-convert:tensorrt .
#   docker run --gpus all -v "$PWD:/work" model-convert:tensorrt model.pt --to onnx --optimize trt
# BuildKit, Docker's default builder, builds only the stage the target needs.

# CUDA + TensorRT image, on NGC's TensorRT 25.01 container (CUDA 12.8, cuDNN 9, Python 3.12). pip replaces the
# container's TensorRT 10.8 with TensorRT 11 (the passes build strongly typed networks, as 11 does); this image has
# not been built on this project's machines, which have no GPU. It takes torch from the default index, whose wheels
# are CUDA builds: no CPU wheel index here. cuda-python stays on
# 12.x, like the container's CUDA. onnxruntime-gpu replaces the CPU onnxruntime, so ONNX artifacts are
# checked on the GPU too; its CUDA 12 build uses the container's CUDA and cuDNN. Running it needs the NVIDIA
# Container Toolkit and a host driver new enough for the newest CUDA among these (torch's wheels included).
FROM nvcr.io/nvidia/tensorrt:25.01-py3 AS tensorrt
# The container's Python is the image's own, so pip installs into it directly.
ENV PIP_NO_CACHE_DIR=1 PIP_BREAK_SYSTEM_PACKAGES=1
WORKDIR /opt/model-convert
COPY pyproject.toml constraints.txt README.md ./
COPY convert ./convert
RUN python3 -m pip install -c constraints.txt ".[torch,openvino,optimize,data,tensorrt]" "tensorrt>=11" "cuda-python>=12,<13" \
    && python3 -m pip uninstall -y onnxruntime \
    && python3 -m pip install -c constraints.txt onnxruntime-gpu
WORKDIR /work
ENTRYPOINT ["convert"]
CMD ["--help"]

# CPU image. Installs the torch extra at the versions the test suite passed with (requirements.lock); the lock's torch
# is the CPU build, so PIP_EXTRA_INDEX_URL points at a CPU-only torch wheel index: torch's default wheels bundle CUDA.
FROM python:3.11-slim AS cpu
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL} PIP_NO_CACHE_DIR=1
WORKDIR /opt/model-convert
COPY pyproject.toml requirements.lock README.md ./
COPY convert ./convert
RUN python -m pip install -c requirements.lock ".[torch]"
WORKDIR /work
ENTRYPOINT ["convert"]
CMD ["--help"]
