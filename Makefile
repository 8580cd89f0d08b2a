# fx2onnx: two commands.
#   make html   builds the site in _build/html (every gallery example runs, warnings are errors;
#               the doctrees go to _build/doctrees, outside the published folder), then checks
#               the pages (_doc/site_check.py: no temporary path, progress bar, tracker number...)
#   make test   runs the fast tier of the tests (on 2 processes: TEST_WORKERS=0 for one): unit tests,
#               converters, patches and one model per family, under 5 minutes; it leaves out the
#               tests marked slow (model sweeps, long end-to-end tests)
#   make test-all  runs every test, the slow ones included (what .ci/run calls)
# Both create .venv on first use and install requirements-docs.txt and the package (editable), and
# node_modules (package.json: transformers.js, which the tests and a gallery page run exported folders in)
# where npm is.
# FX2ONNX_GALLERY_PATTERN=linreg make html   runs only the gallery examples matching a regex,
# FX2ONNX_SCENARIOS_CASES='^OneTensor$'       restricts the scenario zoo (a quick build).

VENV ?= .venv
PY := $(VENV)/bin/python
BOOT_PYTHON ?= $(shell command -v python3.11 || command -v python3)
# reinstalled when the pins or the package metadata change
STAMP := $(VENV)/.fx2onnx-installed
# the JavaScript clients: --ignore-scripts, onnxruntime-node's install script downloads what its package ships
NODE_STAMP := node_modules/.fx2onnx-installed
SPHINXOPTS ?= -W --keep-going
# pytest-xdist workers of `make test` and `make test-all` (TEST_WORKERS=0 runs in one process)
TEST_WORKERS ?= 2
export PYTHONHASHSEED := 0

.PHONY: html test test-all clean venv

venv: $(STAMP) $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null; then npm ci --ignore-scripts --no-audit --no-fund && touch $(NODE_STAMP); \
	else echo "npm not found: node_modules not installed (the transformers.js tests need it)"; fi

$(PY):
	@test -n "$(BOOT_PYTHON)" || { echo "python3.11 or python3 is needed to create $(VENV)"; exit 1; }
	$(BOOT_PYTHON) -m venv $(VENV)

$(STAMP): requirements-docs.txt pyproject.toml | $(PY)
	@if [ -L "$(VENV)" ]; then echo "error: $(VENV) links to another checkout's environment: installing would move its\
	 package here; touch $(STAMP) to use it as it is, or remove the link"; exit 2; fi
	$(PY) -m pip install -r requirements-docs.txt
	$(PY) -m pip install --no-deps -e .
	$(PY) -c "from fx2onnx.torchvision_cpu import write_pth_file; print(write_pth_file())"
	touch $(STAMP)

html: $(STAMP) $(NODE_STAMP)
	$(PY) -m sphinx $(SPHINXOPTS) -b html -d _build/doctrees . _build/html
	$(PY) _doc/site_check.py _build/html
	@echo "The site is in _build/html/index.html"

test: $(STAMP) $(NODE_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not slow"

test-all: $(STAMP) $(NODE_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=30

clean:
	rm -rf _build _generated auto_examples gen_modules sg_execution_times.rst \
		scenarios models api/_generated design/_generated
