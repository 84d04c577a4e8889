# Two commands do everything on a fresh machine (Python >= 3.10):
#   make book   build the HTML book from the outputs stored in the notebooks
#   make test   unit tests, then every notebook under `pytest --nbval` in quick mode
# Both create (or reuse) the virtual environment .venv and install requirements.txt into it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NB ?= notebooks/*.ipynb

.PHONY: install book test execute export check-export colab-check clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is needed; set PYTHON=python3.1x")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

install: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build -W -n --keep-going .
	@echo "The book: $(CURDIR)/_build/html/index.html"

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

clean:
	rm -rf _build
