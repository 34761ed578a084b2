# make test: create .venv if missing, install the pinned stack, run the tests.
# A GPU user picks their torch build, e.g.
#   make test TORCH_SPEC=torch==2.13.0 TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cu126"
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=
DEMO_ARGS ?=
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: install test demo tensorflow-fixtures

install: $(INSTALLED)

$(INSTALLED): requirements.txt elmo_plugin/requirements.txt setup.cfg setup.py pyproject.toml elmo_plugin.pth
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q $$(grep -E '^(pip|setuptools|wheel)==' elmo_plugin/requirements.txt | cut -d' ' -f1)
	$(BIN)/python -m pip install -q $(TORCH_SPEC) $(TORCH_PIP_ARGS)
	@# Python 3.12 and newer: the torchvision built for that torch, from the same index (the set's
	@# torchvision has no build there); nothing on 3.11.
	$(BIN)/python elmo_plugin/common/installation.py --torchvision | xargs -r $(BIN)/python -m pip install -q $(TORCH_PIP_ARGS)
	@# A complete pinned set (the run-time one and the tests' oracles): --no-deps keeps allennlp's
	@# stale torch<1.13 pin out of the way.
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	@# Run elmo_plugin_warnings and elmo_plugin_import_hook at interpreter start-up (see those
	@# modules for why); the wheel carries the same file (setup.py).
	$(BIN)/python -c "import pathlib, shutil, sysconfig; site = pathlib.Path(sysconfig.get_paths()['purelib']); (site / 'elmo_plugin_warnings.pth').unlink(missing_ok=True); shutil.copy('elmo_plugin.pth', site)"
	@touch $@

test: install
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

# The whole ELMo recipe on a generated corpus, in minutes: see elmo_plugin/demo/run.py.
demo: install
	$(BIN)/python -m elmo_plugin.demo.run $(DEMO_ARGS)

# Remakes tests/fixtures/tensorflow/ with TensorFlow and bilm-tf's own code, in their own
# environment (requirements-tensorflow.txt); the tests only read what it writes.
TF_VENV ?= .venv-tensorflow
tensorflow-fixtures:
	@test -x $(TF_VENV)/bin/python || $(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/python -m pip install -q --no-deps -r requirements-tensorflow.txt
	$(TF_VENV)/bin/python tests/fixtures/tensorflow/make_fixtures.py
