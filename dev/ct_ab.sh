#!/usr/bin/env bash
# convt_s2 A/B, one call: KB2-91 CLI timings of staged builds (bench/ablate.sh ABLATE_REFS) and of this build's
# consumer-warpgroup counts, alternating, twice.
cd "$(dirname "$0")/.."
export CONVFUSE_VERBOSE=launch
for r in $(seq ${AB_ROUNDS:-2}); do
    for b in .devbuild/convfuse_abl_* "CONVFUSE_CT_WGS=2 .devbuild/convfuse" "CONVFUSE_CT_WGS=3 .devbuild/convfuse" \
             "CONVFUSE_CONVT_S2=0 .devbuild/convfuse"; do
        echo "--- $b"
        env $b run kb2-91 --iters ${AB_ITERS:-20} 2>&1 | grep -E "^time|launch:|FAIL" | sort -u | sed -E 's/convfuse: launch: //'
    done
done
