# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# torch is pinned through constraints.txt: an unpinned torch would pull gigabytes of CUDA wheels.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EXTRAS := torch,tensorflow,jax,openvino,optimize,mlflow,ray,transformers,dev
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
DEMO := out/demo

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
	$(PY) -m pytest -q

bench: install
	$(PY) -m benchmarks.export_validate
	$(PY) -m benchmarks.optimize
	$(PY) -m benchmarks.scale
	$(PY) -m benchmarks.batch

zoo: install
	$(PY) -m benchmarks.zoo

clean:
	rm -rf $(VENV) out .pytest_cache
