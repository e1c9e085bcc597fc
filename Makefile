# The two commands of the README. Both install what is missing, configure and build first.
BUILD_DIR  ?= build
BUILD_TYPE ?= Release
JOBS       ?= 2
CMAKE_ARGS ?=
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
  CMAKE_ARGS += -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  # The precompiled LibTorch header is only reused by ccache with these relaxations.
  export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
endif

.PHONY: all deps configure build test quickstart bench clean format

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Tests run side by side on few cores: LibTorch's OpenMP threads must sleep, not spin, while
# they wait, or an oversubscribed test slows down by orders of magnitude.
test: build
	@cd $(BUILD_DIR) && OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} ctest --output-on-failure -j $(JOBS) --timeout 1200

quickstart: build
	@bash scripts/quickstart.sh $(BUILD_DIR)

bench: build
	@STRATA_WITH_PEERS=1 bash scripts/install-deps.sh
	@bash bench/run_all.sh $(BUILD_DIR)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	@rm -rf $(BUILD_DIR)
