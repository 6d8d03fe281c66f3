# `make train` and `make test` each create .venv and install on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The install runs uv (itself pinned in constraints.txt and installed by pip): with bytecode compiled, as pip
# would, since this machine sets PYTHONDONTWRITEBYTECODE=1 and every test process would compile torch again.
# FIND_LINKS: a folder of wheels to take first (pip's own find-links setting when it has one: where a machine keeps
# its torch wheel). TORCH_INDEX=https://download.pytorch.org/whl/cpu: PyTorch's CPU-only wheel of the pinned
# version, where the default index would serve its CUDA build (several GB).
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
TORCH_INDEX ?=
INSTALL := $(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode --constraint constraints.txt \
	$(if $(FIND_LINKS),--find-links $(FIND_LINKS)) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
ARGS ?=
# Test workers (pytest-xdist; tests/conftest.py shares the cores out between them): the suite is mostly process
# starts and small models, so two workers beat one on 2 cores (docs/reliability.md). TEST_WORKERS=0: serial.
TEST_WORKERS ?= 2

.PHONY: help install install-core train pretrain test test-fast lint bench dashboard clean

# Training needs only the core (torch, Lightning, Hydra, TensorBoard, scikit-learn); the suite needs every extra.
$(BIN)/.installed-core: pyproject.toml constraints.txt Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --constraint constraints.txt uv
	$(INSTALL) --editable .
	touch $@

$(BIN)/.installed: $(BIN)/.installed-core
	$(INSTALL) --editable '.[dev,sweep,export,surnames,bench,parquet,frame,triton,ray,serve,browser,track,audit]'
	touch $@

# Pretraining needs the core and names-dataset, nothing more.
$(BIN)/.installed-surnames: $(BIN)/.installed-core
	$(INSTALL) --editable '.[surnames]'
	touch $@

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: $(BIN)/.installed  ## create .venv and install every extra (constraints.txt pins torch; TORCH_INDEX: its CPU wheel)

install-core: $(BIN)/.installed-core  ## create .venv and install what training needs, no extras

train: install-core  ## train.py with the defaults; ARGS adds overrides: ARGS="model.cell=lstm trainer.max_epochs=5"
	$(BIN)/python train.py $(ARGS)

pretrain: $(BIN)/.installed-surnames  ## once: the names-dataset model every later run tries on validation (data/pretrained/surnames.ckpt); ARGS adds overrides
	@test -f data/first_names/gender.csv || $(BIN)/nameorigin first-names-table
	@start=$$(date +%s); $(BIN)/python train.py experiment=surnames_pretrain $(ARGS) && \
	echo "make pretrain took $$(( ($$(date +%s) - start) / 60 )) min $$(( ($$(date +%s) - start) % 60 )) s"

test: install  ## the whole suite, as CI runs it; TEST_WORKERS=0: serial; PYTEST_ARGS adds flags
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

test-fast: install  ## the suite without the slow tests, the loop while working (PYTEST_ARGS adds flags)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" $(PYTEST_ARGS)

lint: install  ## ruff, the import contract (layers run one way), no repeated code in src/ (pylint), the docs' figures current (cog)
	$(BIN)/ruff check .
	$(BIN)/cog --check -I . README.md docs/*.md
	$(BIN)/lint-imports
	$(BIN)/pylint --rcfile pyproject.toml --score n src/nameorigin

bench: install  ## benchmarks/benchmark.py; ARGS adds flags (--data <folder of <Language>.txt files>)
	$(BIN)/python -m benchmarks.benchmark $(ARGS)

dashboard: install-core  ## TensorBoard on the newest run or sweep (never a pretraining), bound to localhost
	@run="$$($(BIN)/python -m nameorigin.serving.runs outputs)" || exit 2; \
	echo "tensorboard on $$run"; $(BIN)/tensorboard --logdir "$$run" --host 127.0.0.1

clean:  ## remove .venv and caches (outputs/ stays)
	rm -rf $(VENV) .pytest_cache .ruff_cache src/*.egg-info
