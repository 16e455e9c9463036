#!/usr/bin/env bash
# One device call: the convt_s2 A/B (dev/ct_ab.sh, one round), the faster consumer-warpgroup count exported, then
# the KB2-91 benchmark and the whole GPU test set under it.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cf-out}; mkdir -p "$OUT"
AB=$(AB_ROUNDS=1 bash dev/ct_ab.sh 2>&1); echo "$AB"
t2=$(echo "$AB" | grep -A3 -- "--- CONVFUSE_CT_WGS=2" | grep -m1 "^time" | awk '{print $2}')
t3=$(echo "$AB" | grep -A3 -- "--- CONVFUSE_CT_WGS=3" | grep -m1 "^time" | awk '{print $2}')
best=3; awk -v a="$t2" -v b="$t3" 'BEGIN{exit !(a < b)}' && best=2
echo "=== consumer warpgroups: 2 -> $t2 ms, 3 -> $t3 ms; CONVFUSE_CT_WGS=$best for the rest"
export CONVFUSE_CT_WGS=$best
bash bench/device.sh bench91 2>&1 | tail -8
bash bench/device.sh test 2>&1 | tail -14
