#!/usr/bin/env bash
# Build with CUDA here (no GPU needed) and stage what the device needs into .devbuild/ (git-ignored, carried).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-dev -j2 2>&1 | grep -E "error|warning: [^R]" || true
rm -rf .devbuild && mkdir .devbuild
cp -L build-dev/libconvfuse.so build-dev/convfuse build-dev/tests/c/test_cuda build-dev/tests/c/fuzz_shapes .devbuild/
strip --strip-unneeded .devbuild/* 2>/dev/null || true
du -sh .devbuild
