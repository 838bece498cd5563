# CPU image. Installs the project as the Makefile does, with the same constraints file.
# PIP_EXTRA_INDEX_URL may point at a CPU-only torch wheel index: torch's default wheels bundle CUDA.
FROM python:3.11-slim
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL} PIP_NO_CACHE_DIR=1
WORKDIR /opt/model-convert
COPY pyproject.toml constraints.txt README.md ./
COPY convert ./convert
COPY validators ./validators
COPY fixtures ./fixtures
RUN python -m pip install --upgrade pip && python -m pip install -c constraints.txt ".[torch]"
WORKDIR /work
ENTRYPOINT ["convert"]
CMD ["--help"]
