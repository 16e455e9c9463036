#!/usr/bin/env bash
# THE test command: build into build/, run the C tests (ctest) and the Python tests (pytest), print both summaries.
# With CONVFUSE_CI_EXTRA=1 also tests/asan.sh (ctest under ASan+UBSan) and tests/fuzz_api.sh (libFuzzer, 60 s).
# Exits non-zero if the build or any runner fails. Extra arguments go to the CMake configure step,
# e.g. `bash tests/run.sh -DCONVFUSE_CUDA=OFF`. GPU tests skip, visibly, where there is no device.
set -uo pipefail
cd "$(dirname "$0")/.."

JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
PYTHON="${PYTHON:-python3}"

echo "== configure + build (build/)"
cmake -S . -B build "$@" || exit 1
cmake --build build -j "$JOBS" || exit 1

echo "== ctest"
ctest --test-dir build --output-on-failure 2>&1 | tee build/ctest.log
ctest_rc=${PIPESTATUS[0]}

echo "== pytest"
export CONVFUSE_LIBRARY="$PWD/build/libconvfuse.so"
export CONVFUSE_CLI="$PWD/build/convfuse"
"$PYTHON" -m pytest -q -rs tests/python tests/gpu 2>&1 | tee build/pytest.log
pytest_rc=${PIPESTATUS[0]}

# CONVFUSE_CI_EXTRA=1 (set by .ci/run): also the C tests under ASan+UBSan and a short libFuzzer run (~1.5 min together).
extra_rc=0
if [ "${CONVFUSE_CI_EXTRA:-0}" = 1 ]; then
    echo "== asan (tests/asan.sh)"
    bash tests/asan.sh 2>&1 | tee build/asan.log
    asan_rc=${PIPESTATUS[0]}
    echo "== fuzz_api (tests/fuzz_api.sh)"
    bash tests/fuzz_api.sh 2>&1 | tee build/fuzz_api.log
    fuzz_rc=${PIPESTATUS[0]}
    [ "$asan_rc" -eq 0 ] && [ "$fuzz_rc" -eq 0 ] || extra_rc=1
fi

echo "== summary"
echo "ctest:  $(grep -E 'tests passed|tests failed' build/ctest.log | tail -1) (exit $ctest_rc)"
echo "pytest: $(grep -E '(passed|failed|error|skipped)' build/pytest.log | tail -1) (exit $pytest_rc)"
if [ "${CONVFUSE_CI_EXTRA:-0}" = 1 ]; then
    echo "asan:   $(grep -E '^asan: ' build/asan.log | tail -1 | sed 's/^asan: //') (exit $asan_rc)"
    echo "fuzz:   $(grep -E '^fuzz_api: ' build/fuzz_api.log | tail -1 | sed 's/^fuzz_api: //') (exit $fuzz_rc)"
fi
[ "$ctest_rc" -eq 0 ] && [ "$pytest_rc" -eq 0 ] && [ "$extra_rc" -eq 0 ]
