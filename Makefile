# Two commands do everything on a fresh machine (Python >= 3.10):
#   make book   build the HTML book from the outputs stored in the notebooks
#   make test   unit tests, then every notebook under `pytest --nbval` in quick mode
# Both create (or reuse) the virtual environment .venv: `make book` installs only
# requirements-book.txt (no torch: about a minute from a fresh clone), `make test` all of
# requirements.txt.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BOOK_STAMP := $(VENV)/.installed-book
NB ?= notebooks/*.ipynb

.PHONY: install book test execute export check-export check-zh colab-check clean format lint \
	format-notebooks diagrams tidy-notebooks gpu-check

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is needed; set PYTHON=python3.1x")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(BOOK_STAMP): requirements-book.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is needed; set PYTHON=python3.1x")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-book.txt
	touch $@

install: $(STAMP)

# Both editions: English at _build/html/, the Chinese edition (中文版, its notebooks generated
# from the English ones and zh/translations/ by tools/zh_edition.py) at _build/html/zh/,
# each trimmed to the files its pages load (tools/ship_book.py).
book: $(BOOK_STAMP)
	$(BIN)/python tools/zh_edition.py
	$(BIN)/jupyter-book build -W -n --keep-going .
	$(BIN)/jupyter-book build -W -n --keep-going zh --path-output _build/zh
	rm -rf _build/html/zh && cp -r _build/zh/_build/html _build/html/zh
	$(BIN)/python tools/ship_book.py _build/html _build/html/zh
	@echo "The book: $(CURDIR)/_build/html/index.html (中文版: $(CURDIR)/_build/html/zh/index.html)"

# Is every translation of the Chinese edition current, and its code the English code?
check-zh: $(BOOK_STAMP)
	$(BIN)/python tools/zh_edition.py --check

test: $(STAMP)
	TRANSFORMER_QUICK=1 $(BIN)/python -m pytest --nbval

# Re-run notebooks in full mode, one at a time, storing the outputs the book shows.
# One notebook: make execute NB=notebooks/03_positional_encoding.ipynb
execute: $(STAMP)
	@for nb in $(NB); do \
	  echo "executing $$nb"; \
	  TRANSFORMER_QUICK=0 $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=-1 "$$nb" || exit 1; \
	done

export: $(STAMP)
	$(BIN)/python tools/export_notebooks.py

check-export: $(STAMP)
	$(BIN)/python tools/export_notebooks.py --check

# Every notebook run as Colab runs it: alone, in a fresh Python with only torch, installing the rest itself.
colab-check: $(STAMP)
	$(BIN)/python tools/colab_check.py

# On a CUDA machine: device tests, quick notebooks, the LM beside nanoGPT, the translator,
# notebook 14's ratios -> benchmarks/results/gpu_check.json (benchmarks/GPU.md). Stages:
# make gpu-check GPU_CHECK="--stage lm,mt,speed"; on a CPU: GPU_CHECK="--device cpu --quick"
gpu-check: $(STAMP)
	$(BIN)/python tools/gpu_check.py $(GPU_CHECK)

# Code that fits its column: ruff, configured in pyproject.toml (line length 88).
format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# Format every notebook, then re-export the library from them (the generated modules
# follow). `make format` formats the notebooks too; this also tidies and re-exports.
format-notebooks: $(STAMP)
	$(BIN)/ruff format notebooks/*.ipynb
	$(BIN)/python tools/tidy_notebooks.py
	$(BIN)/python tools/export_notebooks.py

# Plumbing off the page (idempotent): Colab and default_exp cells tagged remove-cell,
# NBVAL comments turned into nbval tags.
tidy-notebooks:
	$(PYTHON) tools/tidy_notebooks.py

# The concept diagrams of the book (book/images/*.svg), notebook 10's beam tree from the
# trained translator (run notebook 09 first), and the Chinese edition's (zh/book/images/).
diagrams: $(STAMP)
	$(BIN)/python tools/diagrams.py
	$(BIN)/python tools/beam_tree.py notebooks/runs/translator.pt
	$(BIN)/python tools/diagrams.py --lang zh

clean:
	rm -rf _build
