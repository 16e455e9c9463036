#!/usr/bin/env bash
# Timing ablations and A/B builds (development only): build the CLI with parts of the fused kernel switched off
# (CF_IG_ABLATE mask, src/cuda/igemm_kernel.cuh; CF_CT_ABLATE for convt_s2) or with other CUDA flags, and stage the
# binaries as .devbuild/convfuse_abl<name>. On the device: bash bench/device.sh ablate (times every staged binary, same run).
#   ABLATE_MASKS="1 2 4 8"                      masks to build (outputs wrong on purpose); "" for none
#   ABLATE_CT_MASKS="1 8 16"                    convt_s2's CF_CT_ABLATE masks (src/cuda/convt_s2.cuh), as _ct<mask>
#   ABLATE_FLAGS="name=-DFOO=1,-DBAR=2"        name=flags pairs (spaces in flags as commas)
#   ABLATE_BASE=<git ref>                       also build that commit's CLI as convfuse_abl_base (the baseline)
#   ABLATE_REFS="name=<git ref> ..."            also build those commits' CLIs as convfuse_abl_<name>
set -euo pipefail
cd "$(dirname "$0")/.."
build() { # name, CUDA flags, source dir
    local d=build-abl$1
    # sm_90a code only (no embedded PTX): half the size, so more of them fit in what a device call carries
    cmake -S "$3" -B $d -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS="$2" \
        -DCMAKE_CUDA_ARCHITECTURES="${ABLATE_ARCHS:-90a-real}" >/dev/null
    cmake --build $d -j${ABLATE_JOBS:-2} --target convfuse_cli > $d/build.log 2>&1 || { tail -20 $d/build.log; exit 1; }
    cp -L $d/convfuse .devbuild/convfuse_abl$1
    strip --strip-unneeded .devbuild/convfuse_abl$1 2>/dev/null || true
}
for m in ${ABLATE_MASKS-1 2 4 8}; do
    build $m "-DCF_IG_ABLATE=$m" .
done
for m in ${ABLATE_CT_MASKS:-}; do
    build _ct$m "-DCF_CT_ABLATE=$m" .
done
for nf in ${ABLATE_FLAGS:-}; do
    build "_${nf%%=*}" "$(echo "${nf#*=}" | tr , ' ')" .
done
build_ref() { # name, git ref
    rm -rf build-ablref-src && git worktree prune
    git worktree add -f --detach build-ablref-src "$2" >/dev/null
    rm -rf build-abl_$1 && build _$1 "" build-ablref-src
    git worktree remove --force build-ablref-src
}
[ -z "${ABLATE_BASE:-}" ] || build_ref base "$ABLATE_BASE"
for nr in ${ABLATE_REFS:-}; do
    build_ref "${nr%%=*}" "${nr#*=}"
done
ls -la .devbuild
