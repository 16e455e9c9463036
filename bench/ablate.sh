#!/usr/bin/env bash
# Timing ablations (development only): build the CLI with parts of the fused kernel switched off
# (CF_IG_ABLATE mask, src/cuda/igemm_kernel.cuh) and stage the binaries as .devbuild/convfuse_ablN.
# On the device: bash bench/device.sh ablate. The outputs of these binaries are wrong on purpose.
set -euo pipefail
cd "$(dirname "$0")/.."
for m in ${ABLATE_MASKS:-1 2 4 8}; do
    d=build-abl$m
    cmake -S . -B $d -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS="-DCF_IG_ABLATE=$m" >/dev/null
    cmake --build $d -j2 --target convfuse_cli > $d/build.log 2>&1 || { tail -20 $d/build.log; exit 1; }
    cp -L $d/convfuse .devbuild/convfuse_abl$m
    strip --strip-unneeded .devbuild/convfuse_abl$m 2>/dev/null || true
done
ls -la .devbuild
