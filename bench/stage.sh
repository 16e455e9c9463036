#!/usr/bin/env bash
# Build with CUDA here (no GPU needed) and stage what the device needs into .devbuild/ (git-ignored, carried).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release >/dev/null
# a failed build must stop here: copying the previous artifacts would time stale code
if ! cmake --build build-dev -j2 > build-dev/build.log 2>&1; then
    grep -E "error" build-dev/build.log | head -20
    echo "stage: BUILD FAILED (build-dev/build.log)"; exit 1
fi
grep -E "warning" build-dev/build.log | grep -v -E "C7513|spill" | head -5 || true
rm -rf .devbuild && mkdir .devbuild
cp -L build-dev/libconvfuse.so build-dev/convfuse build-dev/tests/c/test_cuda build-dev/tests/c/fuzz_shapes .devbuild/
strip --strip-unneeded .devbuild/* 2>/dev/null || true
# the commit these binaries come from (+dirty when the tree had changes): results JSON records it (bench/common.py)
sha=$(git rev-parse HEAD); git diff --quiet HEAD -- src include cli python CMakeLists.txt || sha="$sha+dirty"
echo "$sha" > .devbuild/GIT_SHA
du -sh .devbuild
