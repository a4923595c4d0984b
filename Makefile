# One place knows how to set up a machine: Debian packages, the venv, the pinned wheels.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PACKAGES := qemu-user-static clang-14 lld-14 llvm-14 gcc-aarch64-linux-gnu libc6-dev-arm64-cross
export CI

.PHONY: demo test venv apt bench lint clean

$(VPY):
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e ".[bench,notebooks,dev]"
	$(VPY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

venv: $(STAMP)

# Debian packages later stages need (Hexagon / aarch64 emulation and linking).
# Installed when missing; a machine without root or apt gets a warning, and the
# tests that need these tools skip with a reason.
apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo -n"; fi; \
	  ( $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null ) \
	    || echo "warning: could not install$$missing; emulator-based tests will skip"; \
	fi

demo: $(STAMP) apt
	$(VENV)/bin/tvm-cocopie demo

test: $(STAMP) apt
	$(VPY) -m pytest -q -ra tests

bench: $(STAMP)
	$(VPY) scripts/bench_e2e.py --quick --json bench_e2e.json

lint: $(STAMP)
	$(VENV)/bin/ruff check tvm_cocopie scripts tests

clean:
	rm -rf $(VENV) build *.egg-info
