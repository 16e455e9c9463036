#!/usr/bin/env bash
# convt_s2 pair bug hunt, one call: the pair's channel halves swapped (CONVFUSE_CT_ABLATE=32), sanitizers on a pair case.
cd "$(dirname "$0")/.."
export CONVFUSE_LIBRARY=$PWD/.devbuild/libconvfuse.so PYTHONUNBUFFERED=1 CONVFUSE_CONVT_S2=1
for a in 0 32; do echo "=== CONVFUSE_CT_ABLATE=$a"; CONVFUSE_CT_ABLATE=$a timeout 60 python3 dev/debug_ct.py quick 2>&1 | tail -24; done
for tool in memcheck racecheck synccheck; do
    echo "=== $tool"
    timeout 90 compute-sanitizer --tool $tool .devbuild/fuzz_shapes --backend cuda --seed 1 --case 5 --convt-s2 2>&1 | grep -vE "^refused" | head -30
done
