# rlvr: `make run` and `make test` are all a new checkout needs; both run
# `make setup` first, which is idempotent.
#
#   make setup       .venv with the locked CPU environment + the default model (GPU=1: the GPU lock)
#   make run         setup, then run_pipeline.py $(ARGS)   (Hydra overrides, e.g. ARGS="key=value")
#   make test        setup + tools, then pytest (slow and long tests excluded by pyproject's addopts; mypy runs as a test)
#   make test-long   setup, then only the tests that take a minute or more each (marker `long`; CI runs it after make test)
#   make test-avx2   setup, then the CPU-kind-sensitive tests (precision, padding-free attention, bitsandbytes' CPU
#                    path) as the AVX2-only fp32 CPU kind, emulated here (docs/install.md; CI runs it after make test)
#   make test-slurm  setup, then the SLURM tests (marker `slurm`) against a one-node cluster started on this host
#                    (infrastructure/slurm/local_cluster.sh; installs Debian's slurm + munge where missing: root + apt)
#   make tools       .venv-tools: the hashed static checkers (infrastructure/, mypy, pre-commit; tests/static/)
#   make gpu-sources .cache/gpu-sources: the GPU lock's unsloth, unsloth-zoo and trl files, by hash (source tests)
#   make test-slow   setup, then only the slow tests (need the real default model)
#   make lint        ruff check + ruff format --check + mypy (the same checks as .pre-commit-config.yaml)
#   make check-locks requirements/cpu.txt, poetry.lock and requirements/gpu.txt agree (also a unit test)
#   make lock        re-resolve the lock files (network; see scripts/lock.py)
#   make gpu-check   on a CUDA machine: setup GPU=1, then each GPU feature as a short real run
#                    (scripts/gpu_check.py; table in outputs/gpu_check/<time>/, GPU_CHECK_ARGS="--results FILE"
#                    elsewhere). WHEELS=<dir>: offline, beside a preinstalled torch stack, installing only what it
#                    lacks. CHECK_DEVICE=cpu: what a CPU can run
#   make gpu-wheels  DEST=<dir> GPU_PYTHON=3.12: the GPU lock's wheels for that Python, by hash (for WHEELS=);
#                    scripts/wheel_parts.py pack/join carries the folder in parts of <= 60 MB, hash-checked

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`: most of the suite's time is integration tests, each running
# run_pipeline.py on the tiny model in its worker's process (tests/in_process.py), so two workers keep
# both cores of a 2-core machine busy. Whole files go to one worker (--dist loadfile),
# so a module's shared run fixture is made once. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
# One torch thread per process: with two workers each process already has a core, and a second
# OpenMP thread per process only contends for it (the tests' models are tiny).
TEST_THREADS ?= 1
# 0 skips downloading/converting the default model in `make setup`.
FETCH_MODEL ?= 1
# 1 installs the GPU lock instead (requirements/gpu.txt: CUDA torch, vllm, unsloth, bitsandbytes;
# hashed; Linux x86_64 with Python 3.11-3.13, CUDA machines).
GPU ?= 0
CPU_LOCK := requirements/cpu.txt
GPU_LOCK := requirements/gpu.txt
ifeq ($(GPU),1)
LOCK := $(GPU_LOCK)
STAMP := $(VENV)/.rlvr-setup-stamp-gpu
else
LOCK := $(CPU_LOCK)
STAMP := $(VENV)/.rlvr-setup-stamp
endif

# torch is installed on its own, BEFORE the hashed lock, so that the build
# can be chosen: the lock pins its version (read from the lock here) and
# hashes PyPI's files, and `pip install --require-hashes` keeps an installed
# torch of that version whatever its build. On this project's machines pip
# finds the CPU build (torch==<version>+cpu) in its configured local wheel folder, so
# nothing from the CUDA stack is downloaded. Elsewhere, install the CPU or
# CUDA build of your choice first (e.g. `.venv/bin/pip install torch==<version>
# with pip's index option pointing at the PyTorch index for your CPU/CUDA
# variant), or pass that option here via TORCH_PIP_ARGS. Plain PyPI
# torch on Linux is the CUDA build and pulls several GB of nvidia-* wheels,
# which the CPU lock deliberately does not list.
TORCH_VERSION := $(shell sed -n 's/^torch==\([^ ;\\]*\).*/\1/p' $(CPU_LOCK))
TORCH_PIP_ARGS ?=

.PHONY: help setup run test test-avx2 test-long test-slurm test-slow lint check-locks lock tools lock-tools gpu-sources gpu-check gpu-wheels

help:
	@sed -n 's/^#   //p' Makefile

setup: $(STAMP)
ifeq ($(FETCH_MODEL),1)
	$(PY) -m rlvr.model.embedded
endif

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstalls only when the lock or pyproject.toml is newer than the stamp (one stamp per lock).
# GPU: every line of the GPU lock carries a Linux x86_64 / Python >= 3.11 marker, so elsewhere pip
# would skip them all and succeed: refuse first. Its torch is PyPI's CUDA build, hash-checked like
# the rest; a CPU build of the same version already in .venv would satisfy `torch==<version>`, so
# the last step fails unless the installed torch is a CUDA build.
ifeq ($(GPU),1)
$(STAMP): $(LOCK) pyproject.toml | $(PY)
	@$(PY) -c 'import platform, sys; ok = sys.platform == "linux" and platform.machine() == "x86_64" and (3, 11) <= sys.version_info[:2] <= (3, 13); sys.exit(0 if ok else "$(LOCK) is for Linux x86_64 with Python 3.11-3.13, not " + sys.platform + " " + platform.machine() + " Python " + platform.python_version() + ": use PYTHON=python3.12, or make setup without GPU=1")'
	$(PY) -m pip install --require-hashes -r $(LOCK)
	$(PY) -m pip install --no-deps -e .
	$(PY) -m pip check
	@$(PY) -c 'import sys, torch; sys.exit(0 if torch.version.cuda else "torch " + torch.__version__ + " in $(VENV) is a CPU build: remove $(VENV) and rerun make setup GPU=1")'
	touch $@
else
$(STAMP): $(LOCK) pyproject.toml | $(PY)
	@test -n "$(TORCH_VERSION)" || { echo "no torch==<version> line in $(LOCK)" >&2; exit 1; }
	$(PY) -m pip install "torch==$(TORCH_VERSION)" $(TORCH_PIP_ARGS)
	$(PY) -m pip install --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install --no-deps -e .
	$(PY) scripts/check_locks.py --installed
	touch $@
endif

run: setup
	$(PY) run_pipeline.py $(ARGS)

# pytest exits 5 when it collected no test (e.g. a -k that matches nothing): a run that tested
# nothing must not pass, so that fails too (CI runs this target).
test: setup tools gpu-sources
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests: failing (check PYTEST_ARGS)" >&2; exit $$rc; }

# The AVX2-only fp32 CPU kind, one of the kinds CI machines come in, emulated on an AVX512 or AMX machine
# (docs/install.md, "The AVX2 CPU kind"): ATen's kernels and torch.compile's generated code at AVX2
# (ATEN_CPU_CAPABILITY), oneDNN without its bf16 matmul (ONEDNN_MAX_CPU_ISA), so `precision: auto` picks fp32;
# MKL capped too (no change measured on an AMD EPYC). Kernels compiled for AVX2 get their own torch.compile
# cache. The guard fails the target when the settings do not take (a torch that ignores them). Runs the tests
# whose verdict has differed between the kinds: the padding-free attention probe (flex_attention), precision
# auto, vLLM's precision, QLoRA through bitsandbytes' CPU kernels (which read torch's capability), and one
# pipeline run end to end under `auto`.
AVX2_ENV := ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
	TORCHINDUCTOR_CACHE_DIR=$(abspath .cache/torchinductor-avx2)
AVX2_TESTS ?= tests/unit/test_packing.py tests/unit/test_hardware.py tests/unit/test_rollout.py \
	tests/unit/test_gpu_libraries.py::test_qlora_runs_on_the_cpu_through_operators_that_have_cuda_kernels \
	tests/integration/test_pipeline_smoke.py
test-avx2: setup gpu-sources
	@$(AVX2_ENV) $(PY) -c 'import sys, torch; from rlvr.runtime.hardware import resolve; kind = (torch.backends.cpu.get_cpu_capability(), resolve("auto", "auto").precision); print("emulated CPU kind:", *kind); sys.exit(0 if kind == ("AVX2", "fp32") else "the AVX2 settings did not take (expected AVX2 fp32): see docs/install.md")'
	$(AVX2_ENV) OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=10 $(PYTEST_ARGS) $(AVX2_TESTS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests: failing" >&2; exit $$rc; }

# The tests marked `long` (a minute or more each: kill and resume, several processes, a vLLM engine, sweeps,
# benchmarks/learning.py end to end), on the same workers. CI (.ci/run) runs this after `make test`.
test-long: setup gpu-sources
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -m long -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no long tests: failing" >&2; exit $$rc; }

# The tests marked `slurm` (tests/slurm/), one at a time, against a real slurmctld: a one-node cluster of this
# host that local_cluster.sh starts (unless one runs already) and stops when pytest ends. It needs root and,
# where SLURM/munge are missing, Debian's apt; elsewhere it says why and fails, so a green run always ran them.
# CI (.ci/run) runs it after test-long.
SLURM_CLUSTER := infrastructure/slurm/local_cluster.sh
test-slurm: setup
	$(SLURM_CLUSTER) install
	$(SLURM_CLUSTER) run env OMP_NUM_THREADS=1 $(PY) -m pytest -m slurm --durations=10 $(PYTEST_ARGS) tests/slurm || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no slurm tests: failing" >&2; exit $$rc; }

test-slow: setup
	$(PY) -m pytest -m slow $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no slow tests: failing" >&2; exit $$rc; }

lint: $(STAMP) tools
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(TOOLS_VENV)/bin/mypy

check-locks: $(STAMP)
	$(PY) scripts/check_locks.py

# One command for the first GPU machine (scripts/gpu_check.py: each check a real run_pipeline.py run
# of the embedded model; exit status 1 when a check failed, 3 when none could run). Options of the
# script go in GPU_CHECK_ARGS (e.g. GPU_CHECK_ARGS="--only vLLM").
# CHECK_DEVICE=cpu runs, in the CPU setup, the checks a CPU runs for real (bf16, LoRA, QLoRA through
# bitsandbytes' CPU NF4, and the vLLM ones where the vllm module imports) and skips the rest.
# WHEELS=<dir>, for GPU machines without a package registry: a venv that sees the system's packages
# (a preinstalled torch stack is used as it is) and, from <dir>, only what the machine lacks, hash-checked
# and as wheels only, so no build backend runs (scripts/offline_lock.py --wheels: GPU extras the folder
# does not hold are left out and their checks skipped). rlvr itself is put on the path by a .pth file,
# not built: nothing from the folder runs unless its hash is in the lock. Fill <dir> with
# `make gpu-wheels DEST=<dir> GPU_PYTHON=<the GPU machine's Python>` on a connected Linux x86_64 machine.
CHECK_DEVICE ?= cuda
WHEELS ?=
GPU_CHECK_ARGS ?=

ifneq ($(WHEELS),)
gpu-check:
	@test -d "$(WHEELS)" || { echo "WHEELS=$(WHEELS) is not a directory of wheels" >&2; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) scripts/offline_lock.py $(GPU_LOCK) --wheels="$(abspath $(WHEELS))" > $(VENV)/gpu-lock-offline.txt
	PIP_NO_INDEX=1 PIP_FIND_LINKS="$(abspath $(WHEELS))" $(PY) -m pip install --require-hashes --only-binary=:all: -r $(VENV)/gpu-lock-offline.txt
	$(PY) -c 'import pathlib, site; pathlib.Path(site.getsitepackages()[0], "rlvr-src.pth").write_text(str(pathlib.Path("src").resolve()) + "\n")'
	$(PY) -m pip check || echo "pip check: the preinstalled stack differs from the lock (above); the checks say what runs"
	PIP_NO_INDEX=1 PIP_FIND_LINKS="$(abspath $(WHEELS))" $(PY) -m rlvr.model.embedded
	$(PY) scripts/gpu_check.py --device $(CHECK_DEVICE) $(GPU_CHECK_ARGS)
else ifeq ($(CHECK_DEVICE),cpu)
gpu-check: setup
	$(PY) scripts/gpu_check.py --device cpu $(GPU_CHECK_ARGS)
else
gpu-check:
	$(MAKE) setup GPU=1
	$(PY) scripts/gpu_check.py --device $(CHECK_DEVICE) $(GPU_CHECK_ARGS)
endif

# The GPU lock's wheels for another machine's Python, by hash (entries with no wheel for it are listed).
GPU_PYTHON ?= 3.12
DEST ?=
gpu-wheels: | $(PY)
	@test -n "$(DEST)" || { echo "DEST=<dir> is required" >&2; exit 2; }
	$(PY) scripts/gpu_wheels.py --lock $(GPU_LOCK) --dest "$(DEST)" --python $(GPU_PYTHON)

# Lock tools live in their own venv (.cache/ is git-ignored), pinned.
LOCK_TOOLS := .cache/lock-tools
LOCK_TOOL_PINS := uv==0.13.9 poetry==2.5.1

$(LOCK_TOOLS)/.stamp:
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/python -m pip install $(LOCK_TOOL_PINS)
	touch $@

lock: $(LOCK_TOOLS)/.stamp
	$(LOCK_TOOLS)/bin/python scripts/lock.py --uv $(LOCK_TOOLS)/bin/uv $(LOCK_ARGS)

# Static checkers (checkov, python-hcl2, shellcheck, hadolint, yamllint, mypy, pre-commit) in their own
# venv, from their own hashed lock: checkov's dependency tree never meets the project's environment.
TOOLS_VENV := .venv-tools
TOOLS_LOCK := requirements/tools.txt

$(TOOLS_VENV)/.stamp: $(TOOLS_LOCK)
	$(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/python -m pip install --require-hashes -r $(TOOLS_LOCK)
	touch $@

tools: $(TOOLS_VENV)/.stamp

# The GPU lock's own files of the GPU-only packages (pip download --no-deps --require-hashes with the
# lock's hash lines), read offline by tests/unit/test_gpu_libraries.py; nothing from them is installed.
GPU_SOURCES := .cache/gpu-sources

$(GPU_SOURCES)/.stamp: $(GPU_LOCK) scripts/gpu_sources.py | $(PY)
	$(PY) scripts/gpu_sources.py --lock $(GPU_LOCK) --dest $(GPU_SOURCES)
	touch $@

gpu-sources: $(GPU_SOURCES)/.stamp

lock-tools: $(LOCK_TOOLS)/.stamp
	$(LOCK_TOOLS)/bin/uv pip compile requirements/tools.in --universal --generate-hashes \
		--python-version 3.10 --no-header -o $(TOOLS_LOCK)
