# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# torch is pinned through constraints.txt: an unpinned torch would pull gigabytes of CUDA wheels.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EXTRAS := torch,tensorflow,jax,openvino,optimize,data,executorch,litert,mlflow,ray,transformers,dev
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
DEMO := out/demo
OPTIMUM_VENV := .venv-optimum
OPTIMUM_STAMP := $(OPTIMUM_VENV)/.installed

.PHONY: install chromium demo test bench zoo clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

# Debian's Chromium renders the HTML report in the screenshot test (apt needs root, as in CI).
chromium:
	command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

demo: install
	$(PY) -m fixtures.build_torch $(DEMO)/model cnn
	$(PY) -m convert $(DEMO)/model/cnn.pt2 --to onnx,torchscript,torch_export --out $(DEMO)/artifacts --force

# The linter and the formatter first (configured in pyproject.toml), then the suite.
test: install chromium
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -n 2 --dist loadfile

bench: install $(OPTIMUM_STAMP)
	$(PY) -m benchmarks.export_validate
	$(PY) -m benchmarks.optimize
	$(PY) -m benchmarks.scale
	$(PY) -m benchmarks.localize
	$(PY) -m benchmarks.batch
	$(PY) -m benchmarks.transformers_export --optimum-python $(OPTIMUM_VENV)/bin/python
	$(PY) -m benchmarks.overhead

# Optimum's ONNX exporter, for the Transformers comparison, in an environment of its own: optimum-onnx pins
# transformers < 4.58, and this tool's environment has transformers 5.
$(OPTIMUM_STAMP): constraints.txt
	test -x $(OPTIMUM_VENV)/bin/python || $(PYTHON) -m venv $(OPTIMUM_VENV)
	$(OPTIMUM_VENV)/bin/python -m pip install --quiet -c constraints.txt "optimum-onnx==0.1.0" onnxruntime
	touch $@

zoo: install
	$(PY) -m benchmarks.zoo

clean:
	rm -rf $(VENV) out .pytest_cache
