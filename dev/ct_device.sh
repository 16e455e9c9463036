#!/usr/bin/env bash
# convt_s2 bring-up on the device, one call: error patterns, fuzz failures, ablation timings, ncu.
cd "$(dirname "$0")/.."
export CONVFUSE_LIBRARY=$PWD/.devbuild/libconvfuse.so CONVFUSE_CLI=$PWD/.devbuild/convfuse PYTHONUNBUFFERED=1 CONVFUSE_CONVT_S2=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 dev/debug_ct.py 2>&1 | tail -90
timeout 100 .devbuild/fuzz_shapes --backend cuda --convt-s2 --count 300 --seed 1 2>&1 | grep -A1 "^FAIL" | grep -v reproduce | head -30
timeout 100 .devbuild/fuzz_shapes --backend cuda --convt-s2 --count 300 --seed 1 2>&1 | tail -1
# ablations: the CF_CT_ABLATE builds staged by ABLATE_CT_MASKS="1 2 4 8 16 13" bash bench/ablate.sh
for b in .devbuild/convfuse .devbuild/convfuse_abl_ct* .devbuild/convfuse; do
    echo "--- $(basename $b)"
    timeout 60 $b run kb2-91 --iters 20 2>&1 | grep -E "^time"
done
echo "--- implicit GEMM (CONVFUSE_CONVT_S2=0)"
CONVFUSE_CONVT_S2=0 timeout 60 .devbuild/convfuse run kb2-91 --iters 20 2>&1 | grep -E "^time"
[ "${NCU:-0}" = 1 ] && NCU_N=32 bash bench/device.sh ncu91 2>&1 | tail -45
# then the whole GPU set with the default (convt_s2 off unless a test turns it on)
[ "${TEST:-1}" = 1 ] && env -u CONVFUSE_CONVT_S2 timeout ${TEST_S:-280} bash bench/device.sh test 2>&1 | tail -45
