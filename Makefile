# The two commands of the README. Both install what is missing, configure and build first.
BUILD_DIR  ?= build
BUILD_TYPE ?= Release
JOBS       ?= 2
CMAKE_ARGS ?=
# One launcher, whether or not ccache is installed yet (see the script): the configuration stays
# the same from the first command to the second, so nothing is rebuilt for nothing.
CMAKE_ARGS += -DCMAKE_CXX_COMPILER_LAUNCHER=$(CURDIR)/scripts/compiler-launcher.sh

.PHONY: all deps deps-quickstart configure configure-quickstart build test test-sanitize test-fuzz quickstart bench clean format image image-prebuilt

# What `make quickstart` runs, and all it builds: the first run needs nothing else.
QUICKSTART_TARGETS = strata strata-ps strata-worker strata-evaluator strata-sharder

all: build

deps:
	@bash scripts/install-deps.sh test

deps-quickstart:
	@bash scripts/install-deps.sh quickstart

# The same configuration either way, so that `make test` after `make quickstart` rebuilds nothing.
CONFIGURE = cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS) >/dev/null

configure: deps
	@$(CONFIGURE)

configure-quickstart: deps-quickstart
	@$(CONFIGURE)

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Tests run side by side on few cores: LibTorch's OpenMP threads must sleep, not spin, while
# they wait, or an oversubscribed test slows down by orders of magnitude.
test: build
	@cd $(BUILD_DIR) && OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} ctest --output-on-failure -j $(JOBS) --timeout 1200

# The ring, the parameter server and the live switch again, under Thread- and AddressSanitizer
# (their own build trees, only the targets they need); CI runs it after the suite.
test-sanitize: deps
	@bash scripts/sanitize-tests.sh

# The parsers of what crosses a process boundary (tensor codec, checkpoints, job spec, ring
# segments) under libFuzzer with ASan and UBSan, FUZZ_SECONDS (45) each, from the corpus in
# tests/fuzz/corpus; a tree of its own (build-fuzz/, clang). The script installs what is missing.
# CI runs it after test-sanitize.
test-fuzz:
	@bash scripts/fuzz.sh

quickstart: configure-quickstart
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target $(QUICKSTART_TARGETS)
	@bash scripts/quickstart.sh $(BUILD_DIR)

# The container image (docker/Dockerfile, docs/deploy.md "The image") in your Docker daemon
# (DOCKER_HOST). `image` compiles inside the image build: needs only a daemon, takes long on two
# cores. `image-prebuilt` copies this machine's build/bin into it: no compiling, a minute or two.
IMAGE ?= strata:latest

image: deps
	@bash scripts/make-image.sh --from-source --tag $(IMAGE)

image-prebuilt: build
	@bash scripts/make-image.sh --prebuilt $(BUILD_DIR)/bin --tag $(IMAGE)

bench: build
	@STRATA_WITH_PEERS=1 bash scripts/install-deps.sh
	@bash bench/run_all.sh $(BUILD_DIR)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	@rm -rf $(BUILD_DIR) build-tsan build-asan build-fuzz
