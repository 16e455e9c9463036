#!/usr/bin/env bash
# THE test command: build into build/, run the C tests (ctest) and the Python tests (pytest), print both summaries.
# Exits non-zero if the build or either runner fails. Extra arguments go to the CMake configure step,
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

echo "== summary"
echo "ctest:  $(grep -E 'tests passed|tests failed' build/ctest.log | tail -1) (exit $ctest_rc)"
echo "pytest: $(grep -E '(passed|failed|error|skipped)' build/pytest.log | tail -1) (exit $pytest_rc)"
[ "$ctest_rc" -eq 0 ] && [ "$pytest_rc" -eq 0 ]
