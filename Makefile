# Two commands do all the set-up on a fresh machine: `make demo` and `make test`. Both install requirements.lock: every
# package at the version the whole suite last passed with (`make lock` refreshes it).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EXTRAS := torch,tensorflow,jax,openvino,optimize,data,executorch,litert,mlflow,ray,transformers,peft,sentence-transformers,diffusers,docs,dev
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
LOCK := requirements.lock
# keras-hub goes in with --no-deps, beside the lock: on Linux it requires tensorflow-text, which would pull the full
# tensorflow beside tensorflow-cpu, and it pins an older kagglesdk than the lock's. Its backbones and task models run
# without tensorflow-text: only its tokenizers and preprocessors use it, and a conversion runs the model alone.
KERAS_HUB := keras-hub==0.32.0
# uv reads no pip configuration: it is given the --find-links pip is configured with (where the CPU torch wheel lies)
UV_FIND_LINKS := $(foreach link,$(PIP_FIND_LINKS),--find-links $(link))
DEMO := out/demo
OPTIMUM_VENV := .venv-optimum
OPTIMUM_STAMP := $(OPTIMUM_VENV)/.installed

.PHONY: install chromium demo test test-fast test-latest lock bench zoo docs newcomer clean

install: $(STAMP)

$(STAMP): pyproject.toml $(LOCK) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -r $(LOCK)
	$(PIP) install --quiet --no-deps $(KERAS_HUB)
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Debian's Chromium renders the HTML report in the screenshot test (apt needs root, as in CI).
chromium:
	command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

demo: install
	$(PY) -m fixtures.build_torch $(DEMO)/model cnn
	$(PY) -m convert $(DEMO)/model/cnn.pt2 --to onnx,torchscript,torch_export --out $(DEMO)/artifacts --force

# The linter and the formatter first (configured in pyproject.toml), then the suite (tests/test_docs.py builds the
# documentation site with mkdocs build --strict and runs every command it shows).
test: install chromium
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -n 2 --dist loadfile

# The inner loop, under a minute on 2 cores (34 s measured on 2026-11-28): the tests marked `fast` (the marker is
# registered in pyproject.toml). They are the unit and layer tests (tests/conftest.py's FAST lists their folders and files and marks them) and a handful of
# end-to-end tests marked @pytest.mark.fast in their modules: one torch -> ONNX CLI run (test_e2e_torch.py, the cnn
# fixture), a gate run (test_gate.py) and a real failed report rendered as Markdown and JUnit XML (reports/).
# To add a test, mark it @pytest.mark.fast (keep it to a conversion or two); modules with no fast test are not imported.
test-fast: install
	$(PY) -m pytest -q -n 2 -m fast

# The newest release of every dependency, no lock: the fast tests and one conversion per source kind and target, in
# .venv-latest; the versions and the outcome go to compat/latest.md, and a pass widens the tested ranges.
test-latest: install
	PIP_FIND_LINKS="$(PIP_FIND_LINKS)" $(PY) -m tools.latest --extras $(EXTRAS)

# Every dependency at its newest release (torch held by constraints.txt), installed, and the whole suite run on it; only a
# pass replaces requirements.lock and records the set as the check `lock` with the tested ranges. When the suite fails,
# the lock stays as it was (the next make reinstalls it): fix the code or add an upper bound in pyproject.toml, then run
# it again.
lock: install
	$(PY) -m uv pip compile pyproject.toml $(foreach extra,$(subst $(comma), ,$(EXTRAS)),--extra $(extra)) -c constraints.txt \
		$(UV_FIND_LINKS) --python-version 3.11 --python-platform x86_64-manylinux_2_28 --upgrade --quiet \
		--custom-compile-command "make lock" -o $(LOCK).new
	$(PIP) install --quiet -r $(LOCK).new
	$(MAKE) test || { rm -f $(STAMP) $(LOCK).new; echo "make lock: the suite failed on the new versions; requirements.lock is unchanged"; exit 1; }
	mv $(LOCK).new $(LOCK)
	touch $(STAMP)
	$(PY) -m tools.versions record lock --passed --note "make test"
	$(PY) -m tools.versions ranges

# Optimum's ONNX exporter, for the Transformers comparison, in an environment of its own: optimum-onnx pins
# transformers < 4.58, and this tool's environment has transformers 5. Its diffusion pipelines need diffusers, before
# 0.36: later ones require huggingface-hub 1 or later, which transformers 4.57 refuses.
$(OPTIMUM_STAMP): $(LOCK)
	test -x $(OPTIMUM_VENV)/bin/python || $(PYTHON) -m venv $(OPTIMUM_VENV)
	$(OPTIMUM_VENV)/bin/python -m pip install --quiet -c constraints.txt "optimum-onnx==0.1.0" "onnxruntime==$$(sed -n 's/^onnxruntime==//p' $(LOCK))" "diffusers<0.36"
	touch $@

# The documentation site, from docs/ (mkdocs.yml), into build/site; `$(PY) -m mkdocs serve` shows it while you edit.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# A newcomer's first hour (tools/newcomer.py): the README's install lines into a fresh environment, then its
# "Convert your model" lines through that environment's model-convert, from a user's folder outside the repository.
newcomer:
	$(PYTHON) -m tools.newcomer

zoo: install
	$(PY) -m benchmarks.zoo
	$(PY) -m benchmarks.zoo_hf

clean:
	rm -rf $(VENV) .venv-latest out .pytest_cache
