# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test bench lint architecture clean

$(STAMP): pyproject.toml .ci/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned resolve pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c .ci/constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gymforge demo --profile tiny

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .

# The house's rules: imports go one way, every output holds to its documented record.
architecture: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_architecture.py tests/data_contracts/test_schemas.py

clean:
	rm -rf $(VENV) data
