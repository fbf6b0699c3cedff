# The two commands a user needs: `make demo` and `make test`. Each installs what it needs,
# configures and builds first.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
export CCACHE_SLOPPINESS = pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_DIR ?= $(HOME)/.cache/ccache
# Paths inside the checkout are hashed relative to it, so two clones share cache entries.
export CCACHE_BASEDIR ?= $(CURDIR)

.PHONY: demo test test-asan setup configure build clean

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD_DIR)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	$(MAKE) test-asan

# The mutation and fuzz suites (label asan) again, built with AddressSanitizer and UBSan.
test-asan: setup
	cmake -S . -B $(BUILD_DIR)-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DYETO_SANITIZE=ON \
	  -DYETO_BUILD_BENCH=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR)-asan -j $(JOBS) --target yeto_asan_tests
	ctest --test-dir $(BUILD_DIR)-asan -L asan --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR)
