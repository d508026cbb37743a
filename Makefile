# Two commands do all the set-up on a fresh machine:
#   make demo   create .venv, install with the bundled local model, index data/ and answer a query
#   make test   create/update .venv with the dev dependencies and run the whole test suite
# While working, `make test-fast` runs the unit tests alone (same install, a third of the CPU): it deselects the tests
# marked for the bundled model, notebooks, Milvus, real providers, subprocesses and slow work (FAST_TESTS; the
# conftest fails a test that loads the model or starts a subprocess without its marker: tests/helpers/tiers.py).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installs go through uv: the dev dependencies take about 15 s on a fresh machine, pip's resolver and
# installer about 75 s. uv reads neither pip's configuration nor its cache: the wheel folders pip is
# configured with (find-links, from a config file or PIP_FIND_LINKS: where a machine keeps its CPU build of
# torch) are passed on, and constraints.txt pins torch either way. The dev install is not byte-compiled (the
# test run writes the bytecode of what it imports; compiling every module would take longer than it saves);
# the demo's is, as pip's was.
FIND_LINKS = $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | sort -u)
GET_UV = [ -x $(BIN)/uv ] || $(BIN)/python -m pip install --quiet "uv>=0.5,<1"
INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python -c constraints.txt $(addprefix --find-links ,$(FIND_LINKS))
FAST_TESTS = not local_model and not notebook and not milvus and not integration and not subprocess and not slow
DEMO_INDEX ?= .demo-index
DEMO_QUERY ?= Why did the batteries come through the flood without harm?

.PHONY: demo test test-fast lint sample-calibration bench bench-scale bench-documents bench-quality bench-quick bench-startup bench-updates bench-milvus bench-languages bench-analysis bench-unread bench-serve bench-tenants bench-ingest bench-int8 clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-local: pyproject.toml constraints.txt | $(BIN)/python
	$(GET_UV)
	$(INSTALL) --compile-bytecode -e ".[local]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml constraints.txt | $(BIN)/python
	$(GET_UV)
	$(INSTALL) -e ".[local,dev]"
	touch $@ $(VENV)/.installed-local

demo: $(VENV)/.installed-local
	HF_HUB_OFFLINE=1 $(BIN)/langchain-fusion index data --out $(DEMO_INDEX) --embeddings local
	HF_HUB_OFFLINE=1 $(BIN)/langchain-fusion query $(DEMO_INDEX) "$(DEMO_QUERY)" -k 4

test: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

test-fast: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -m "$(FAST_TESTS)"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check langchain_fusion tests benchmarks
	$(BIN)/mypy

# The README's calibration table on the bundled sample, and docs/sample-reliability.png.
sample-calibration: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 $(BIN)/python scripts/sample_calibration.py

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/latency.py

bench-scale: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/scale.py

bench-documents: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/compact_documents.py

bench-quality: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/quality.py

bench-updates: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/updates.py

bench-milvus: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/milvus.py

bench-languages: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/languages.py

bench-analysis: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/analysis_speed.py

bench-unread: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/unread_queries.py

bench-serve: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/serve_load.py

bench-tenants: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/tenants.py

# Ingestion speed: the bundled model and the index build against sentence-transformers and a by-hand LangChain build.
bench-ingest: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/ingest.py > benchmarks/results-ingest.md

# Static int8 builds of the bundled model against the shipped one (needs NNCF: the quantize extra).
bench-int8: $(VENV)/.installed-dev
	$(INSTALL) -e ".[quantize]"
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/int8_activations.py > benchmarks/results-int8.md

bench-startup: $(VENV)/.installed-dev
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/cli_startup.py --runs 3

bench-quick: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/latency.py --sizes 10000 --queries 50

clean:
	rm -rf $(VENV) $(DEMO_INDEX) .pytest_cache .mypy_cache .ruff_cache
