#!/usr/bin/env bash
# convt_s2 after the descriptor-mask fix, one call: quick pair cases, the ct step (timing, its tests, fuzz),
# then the whole GPU set with convt_s2 on by default if ON_DEFAULT=1.
cd "$(dirname "$0")/.."
export CONVFUSE_LIBRARY=$PWD/.devbuild/libconvfuse.so CONVFUSE_CLI=$PWD/.devbuild/convfuse PYTHONUNBUFFERED=1
CONVFUSE_CONVT_S2=1 timeout 60 python3 dev/debug_ct.py quick 2>&1 | tail -24
bash bench/device.sh ct 2>&1 | tail -45
