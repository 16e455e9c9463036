#!/usr/bin/env bash
# compute-sanitizer over the GPU test set, on the device: memcheck, racecheck, initcheck and synccheck on the
# C GPU tests (test_cuda: every chain kind incl. BN training, chunked softmax, strict and TF32) and a slice of
# the seeded shape fuzzer (also in the convt_s2 kernel's family). Fails on any finding. Usage: bash tests/sanitize_gpu.sh [bin-dir] (default .devbuild).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.devbuild}
command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; exit 2; }
rc=0
for tool in memcheck racecheck initcheck synccheck; do
    for cmd in "$BIN/test_cuda" "$BIN/fuzz_shapes --backend cuda --count ${SANITIZE_FUZZ_COUNT:-40} --seed 7" \
               "env CONVFUSE_CONVT_S2=1 $BIN/fuzz_shapes --backend cuda --convt-s2 --count ${SANITIZE_CT_COUNT:-12} --seed 7"; do
        log=$(mktemp)
        extra=""
        [ "$tool" = memcheck ] && extra="--leak-check full"
        compute-sanitizer --tool "$tool" $extra --error-exitcode 99 $cmd >"$log" 2>&1
        r=$?
        summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$log" | tr '\n' ' ')
        echo "$tool: ${cmd%% *}: exit $r; ${summary:-no summary line}"
        if [ $r -ne 0 ]; then
            rc=1
            grep -E "^=========" "$log" | head -20
        fi
        rm -f "$log"
    done
done
[ $rc -eq 0 ] && echo "compute-sanitizer: clean" || echo "compute-sanitizer: FINDINGS"
exit $rc
