#!/usr/bin/env bash
# The C tests (ctest) under AddressSanitizer + UndefinedBehaviorSanitizer: a Debug, CPU-only build in build-asan/
# with -DCONVFUSE_SANITIZE=ON (library and tests instrumented, every report fatal). Extra arguments go to the
# configure step. Exits non-zero if the build fails or any test fails or reports. GPU code is not covered here:
# the lead runs tests/gpu under compute-sanitizer (docs/reliability.md).
set -uo pipefail
cd "$(dirname "$0")/.."

JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
B=build-asan

echo "== asan: configure + build ($B/, Debug, -fsanitize=address,undefined)"
# The shape fuzzer runs fewer cases here: unoptimised, instrumented code is ~10x slower.
mkdir -p "$B"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Debug -DCONVFUSE_SANITIZE=ON -DCONVFUSE_CUDA=OFF -DCONVFUSE_BUILD_CLI=OFF \
    -DCONVFUSE_FUZZ_SHAPES_CPU_COUNT="${FUZZ_SHAPES_COUNT:-200}" "$@" >"$B/configure.log" 2>&1 \
    || { cat "$B/configure.log"; echo "asan: FAILED: configure"; exit 1; }
cmake --build "$B" -j "$JOBS" >"$B/build.log" 2>&1 || { tail -40 "$B/build.log"; echo "asan: FAILED: build"; exit 1; }

echo "== asan: ctest"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "$B" --output-on-failure 2>&1 | tee "$B/ctest.log"
rc=${PIPESTATUS[0]}
echo "asan: $(grep -E 'tests passed|tests failed' "$B/ctest.log" | tail -1) (exit $rc)"
exit "$rc"
