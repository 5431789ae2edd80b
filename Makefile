# The README's two commands:
#   make run    build and run gpuorch on this machine with the embedded defaults
#   make test   build with sanitizers and run every test; ends with "N passed, N failed"
# and the developers' third:
#   make lint   clang-tidy and cppcheck over src/; any finding fails
# All first run scripts/setup.sh, which installs the Debian packages as root
# (or names what is missing otherwise).

BUILD      ?= build
TEST_BUILD ?= build-test
BENCH_BUILD ?= build-bench

.PHONY: all run test setup build bench lint format clean install

all: build

setup:
	@scripts/setup.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized

build: setup $(BUILD)/build.ninja
	ninja -C $(BUILD)

# A controller, agents (real GPUs, else two fake nodes of 8 H100s) and the
# starter configuration, in ./gpuorch-run (GPUORCH_RUN_DIR) on 127.0.0.1:8080
# (GPUORCH_PORT); Ctrl-C stops it all. See scripts/run.sh.
run: build
	@scripts/run.sh $(BUILD)

$(TEST_BUILD)/build.ninja:
	meson setup $(TEST_BUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

# The test build is -O0 with sanitizers; the optimised build of `make run`
# is compiled too, so that warnings only the optimiser finds (-Werror) fail
# here rather than in `make run`.
test: setup $(TEST_BUILD)/build.ninja $(BUILD)/build.ninja
	ninja -C $(BUILD)
	ninja -C $(TEST_BUILD)
	@tests/tools/run_tests.sh $(TEST_BUILD)

$(BENCH_BUILD)/build.ninja:
	meson setup $(BENCH_BUILD) --buildtype=release -Db_ndebug=true -Db_lto=true

bench: setup $(BENCH_BUILD)/build.ninja
	ninja -C $(BENCH_BUILD)
	bench/run.sh $(BENCH_BUILD)

# clang-tidy (.clang-tidy: which checks, and why some are off) and cppcheck
# (tools/lint/) over the C sources of src/, clang-tidy with $(BUILD)'s
# compile_commands.json; each finding is printed once and any fails the target.
# LINT_DIRS narrows it to folders or files of src/:
#   make lint LINT_DIRS="src/core src/util"
LINT_DIRS ?= src
lint: setup $(BUILD)/build.ninja
	@BUILD=$(BUILD) scripts/lint.sh $(LINT_DIRS)

# The binary into $(DESTDIR)$(PREFIX)/bin; with SLURM_WRAPPERS=1 also Slurm's
# commands beside it (sbatch, squeue, scancel, srun, salloc, sacct, sinfo,
# scontrol, seff: scripts that run the installed gpuorch; docs/slurm.md).
#   make install PREFIX=/opt/gpuorch SLURM_WRAPPERS=1
PREFIX ?= /usr/local
SLURM_WRAPPERS ?= 0
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BUILD)/gpuorch $(DESTDIR)$(PREFIX)/bin/gpuorch
	@if [ "$(SLURM_WRAPPERS)" = 1 ]; then \
	  $(BUILD)/gpuorch slurm-wrappers --gpuorch $(PREFIX)/bin/gpuorch $(DESTDIR)$(PREFIX)/bin; \
	fi

format:
	clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tests/*.c' 'tests/*.h' 'bench/*.c')

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(BENCH_BUILD)
