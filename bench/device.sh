#!/usr/bin/env bash
# Everything one device call does, in order: GPU facts, C GPU test, GPU pytest set, benchmarks.
# The library is built on the development machine (no GPU there) and carried in .devbuild/ (see bench/stage.sh).
# Usage (on the device): bash bench/device.sh [test] [bench91] [bench73] [sanitize] ...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cf-out}
mkdir -p "$OUT"
export CONVFUSE_LIBRARY=$PWD/.devbuild/libconvfuse.so CONVFUSE_CLI=$PWD/.devbuild/convfuse PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
rc=0
for step in "$@"; do
    echo "=== $step"
    case $step in
    test)
        timeout 120 .devbuild/test_cuda 2>&1 | tail -15 || rc=1
        timeout 480 python3 -m pytest -q -rs tests/gpu ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -40
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    ct)  # the stride-2 transposed-conv kernel (convt_s2): a small run first (a hang costs 30 s), CLI timing of KB2-91
         # on it (3 and 2 consumer warpgroups) and on the implicit GEMM (CONVFUSE_CONVT_S2=0), then its GPU tests
        CONVFUSE_CONVT_S2=1 CONVFUSE_VERBOSE=launch timeout 30 .devbuild/convfuse run kb2-91 --batch 2 --iters 2 2>&1 | tail -6 || rc=1
        for k in CONVFUSE_CT_WGS=3 CONVFUSE_CONVT_S2=0 CONVFUSE_CT_WGS=2 CONVFUSE_CT_WGS=3; do
            echo "--- $k: convfuse run kb2-91"
            env $k CONVFUSE_VERBOSE=launch timeout 120 .devbuild/convfuse run kb2-91 --iters ${AB_ITERS:-20} 2>&1 \
                | grep -E "^time|launch:|FAIL|rror|max_abs|impl" | sort -u || rc=1
        done
        timeout 300 python3 -m pytest -q -x -rs tests/gpu/test_convt_s2.py ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_ct.log" | tail -25
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
        CONVFUSE_CONVT_S2=1 timeout 200 .devbuild/fuzz_shapes --backend cuda --convt-s2 --count ${FUZZ_COUNT:-300} --seed ${FUZZ_SEED:-1} 2>&1 \
            | grep -vE "^refused" | tail -4
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    bench91) timeout 400 python3 bench/kb2_91.py --out "$OUT/kb2_91.json" ${BENCH_ARGS:-} || rc=1 ;;
    bench73) timeout 400 python3 bench/kb2_73.py --out "$OUT/kb2_73.json" ${BENCH_ARGS:-} || rc=1 ;;
    ncu91|ncu73)
        blk=kb2-${step#ncu}
        timeout 300 ncu --kernel-name regex:'cf_(ig|ct)_kernel' --launch-skip 1 --launch-count 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
            --section InstructionStats --section SourceCounters \
            --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__inst_executed.sum \
            python3 bench/profile_one.py $blk ${NCU_N:-16} > "$OUT/ncu_$blk.txt" 2>&1 || rc=1
        grep -E "Duration|Throughput|Busy|Stall|Warp Cycles|Issued|Registers|Theoretical Occ|Achieved Occ|dram__|lts__t_bytes|inst_executed|Hit Rate|Bank" "$OUT/ncu_$blk.txt" | head -60 ;;
    full91|full73|full73e)
        blk=kb2-${step#full}; [ "$step" = full73e ] && blk=kb2-73-eval
        timeout 400 ncu --set full --import-source no --kernel-name regex:'cf_(ig|ct)_kernel' --launch-skip ${NCU_SKIP:-1} --launch-count 1 \
            -o "$OUT/prof_$blk" -f python3 bench/profile_one.py $blk ${NCU_N:-16} > /dev/null 2>&1 || rc=1
        ncu --import "$OUT/prof_$blk.ncu-rep" --page details > "$OUT/details_$blk.txt" 2>&1
        ncu --import "$OUT/prof_$blk.ncu-rep" --page source --csv --print-source sass > "$OUT/sass_$blk.csv" 2>&1
        rm -f "$OUT/prof_$blk.ncu-rep"
        grep -E "Duration|Issued Ipc|Stall|Warp Cycles Per Issued|Executed Instructions  " "$OUT/details_$blk.txt" | head -20
        python3 bench/sass_top.py "$OUT/sass_$blk.csv" 30 2>&1 | head -60
        ls -la "$OUT" ;;
    fuzz)  # the default choice (wgmma + TMA input patch where it fits), then each path and patch variant forced
        for v in ${FUZZ_PATHS:-auto nosplit sync wgmma wgmma-gather patch-tma patch-cp.async patch-4ch slots1 slots2 ranges wide vec1 vec2}; do
            echo "--- fuzz, tensor-core path: $v"; a=""
            case $v in
            sync) e="CONVFUSE_IG_MMA=sync" ;;
            wgmma) e="CONVFUSE_IG_MMA=wgmma" ;;
            wgmma-gather) e="CONVFUSE_IG_MMA=wgmma CONVFUSE_IG_PATCH=0" ;;
            patch-cp.async) e="CONVFUSE_IG_TMA=0" ;;
            patch-tma) e="CONVFUSE_IG_TMA=1" ;;
            patch-4ch) e="CONVFUSE_IG_PATCH_CPS=4" ;;
            nosplit) e="CONVFUSE_IG_SPLIT=0" ;;
            slots1) e="CONVFUSE_IG_PATCH_SLOTS=1" ;;
            slots2) e="CONVFUSE_IG_PATCH_SLOTS=2" ;;
            ranges) e="CONVFUSE_IG_INTERLEAVE=0" ;;
            wide) e="DEFAULT=1"; a="--wide" ;;  # rows of 24-264 pixels (fuzz_shapes --wide)
            convt) e="CONVFUSE_CONVT_S2=1"; a="--convt-s2" ;;  # the convt_s2 kernel's family
            vec1) e="CONVFUSE_IG_PATCH_VEC=1 CONVFUSE_IG_TMA=0" ;;  # 4-byte patch copies everywhere
            vec2) e="CONVFUSE_IG_PATCH_VEC=2 CONVFUSE_IG_TMA=0" ;;
            *) e="DEFAULT=1" ;;
            esac
            # the implicit GEMM's knobs test the implicit GEMM: convt_s2 would take its shapes first
            case $v in auto|convt) ;; *) e="CONVFUSE_CONVT_S2=0 $e" ;; esac
            env $e timeout 300 .devbuild/fuzz_shapes --backend cuda $a \
                --count ${FUZZ_COUNT:-1000} --seed ${FUZZ_SEED:-1} 2>&1 | grep -vE "^refused" | tail -4
            [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
        done ;;
    sanitize) timeout 500 bash tests/sanitize_gpu.sh .devbuild || rc=1 ;;
    cli)
        for a in "run kb2-91" "run kb2-91 --strict-fp32" "run kb2-73 --mode train" "run kb2-73 --mode eval" "list" "info"; do
            echo "--- convfuse $a"; timeout 240 .devbuild/convfuse $a 2>&1 | tail -14 || rc=1
        done ;;
    kbcheck) timeout 300 python3 kernelbench/check.py --problem all --device cuda --trials ${KB_TRIALS:-3} 2>&1 | tail -20
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
        timeout 200 python3 kernelbench/check.py --problem 73 --mode eval --device cuda --trials 2 2>&1 | tail -6 ;;
    variants)  # which kernel variant each default block launches
        for a in "kb2-91" "kb2-73 --mode eval" "kb2-73 --mode train"; do
            CONVFUSE_VERBOSE=launch timeout 120 .devbuild/convfuse run $a --iters 3 2>&1 | grep -E "launch:" | sort -u
        done ;;
    ab)  # the same blocks on the wgmma and the mma.sync variants (CONVFUSE_IG_MMA=sync), CLI timing + float64 check
        for a in "kb2-91" "kb2-73 --mode eval" "kb2-73 --mode train"; do
            for v in wgmma sync; do
                echo "--- $v: convfuse run $a"
                CONVFUSE_IG_MMA=$v CONVFUSE_VERBOSE=launch timeout 200 .devbuild/convfuse run $a --iters ${AB_ITERS:-20} 2>&1 \
                    | grep -vE "^\s*$" | sort -u | tail -8 || rc=1
            done
        done ;;
    knobs)  # the input patch against the per-thread gather, ring depth and cluster pacing, CLI timing + float64 check
        for a in "kb2-91" "kb2-73 --mode eval" "kb2-73 --mode train"; do
            for k in "" CONVFUSE_IG_PATCH=0 CONVFUSE_IG_MMA=sync ${KNOBS:-CONVFUSE_IG_PATCH_CPS=4 CONVFUSE_IG_TMA=0 CONVFUSE_IG_TMA=1 CONVFUSE_IG_PREFETCH=0}; do
                [ -n "$k" ] || k="DEFAULT=1"
                echo "--- $k: convfuse run $a"
                env "$k" CONVFUSE_VERBOSE=launch timeout 200 .devbuild/convfuse run $a --iters ${AB_ITERS:-20} 2>&1 \
                    | grep -E "^time|launch:|FAIL|rror" | sort -u | sed -E 's/ \(median.*//; s/convfuse: launch: //' || rc=1
            done
        done 2>&1 | tee "$OUT/knobs.txt" ;;
    oddw)  # widths that are not a multiple of 4: the patch by 8- or 4-byte copies against the per-thread gather;
           # at the default shapes, 16-byte against 4-byte copies (the TMA off)
        for a in "kb2-73 --mode eval --shape 128,8,130,130" "kb2-73 --mode eval --shape 128,8,129,129" \
                 "kb2-73 --mode train --shape 128,8,129,129" "kb2-91 --shape 128,64,65,65" "kb2-91 --shape 128,64,66,66" \
                 "kb2-73 --mode eval" "kb2-91"; do
            case "$a" in *shape*) knobs="DEFAULT=1 CONVFUSE_IG_PATCH=0" ;; *) knobs="CONVFUSE_IG_TMA=0 CONVFUSE_IG_PATCH_VEC=1" ;; esac
            for k in $knobs; do
                [ "$k" = CONVFUSE_IG_PATCH_VEC=1 ] && k="CONVFUSE_IG_TMA=0 CONVFUSE_IG_PATCH_VEC=1"
                echo "--- $k: convfuse run $a"
                env $k CONVFUSE_VERBOSE=launch timeout 60 .devbuild/convfuse run $a --iters ${AB_ITERS:-20} 2>&1 \
                    | grep -E "^time|launch:|FAIL|rror" | sort -u | sed -E 's/ \(median.*//; s/convfuse: launch: //' || rc=1
            done
        done 2>&1 | tee "$OUT/oddw.txt" ;;
    large)  # tensors past 2^31 bytes (N=256: y is 2.2 GB) and past 2^31 elements (N=1024: 2.2 G elements, 8.7 GB)
        for n in 256 1024; do
            echo "--- convfuse run kb2-91 --batch $n"; timeout 240 .devbuild/convfuse run kb2-91 --batch $n --iters 5 2>&1 | tail -6 || rc=1
        done ;;
    ablate|ctablate)  # CLI timings of this build and staged CLIs (bench/ablate.sh; ablation builds' outputs are
           # wrong): ablate times every convfuse_abl* on the three blocks, ctablate the convt_s2 ablation builds
           # (ABLATE_CT_MASKS) on KB2-91; AB_BINS (a glob in .devbuild), AB_BLOCKS (comma-separated), AB_ROUNDS override
        bins=${AB_BINS:-convfuse_abl*}; blocks=${AB_BLOCKS:-kb2-91,kb2-73 --mode eval,kb2-73 --mode train}
        if [ "$step" = ctablate ]; then bins=${AB_BINS:-convfuse_abl_ct*}; blocks=${AB_BLOCKS:-kb2-91}; fi
        IFS=, read -ra blks <<< "$blocks"
        for r in $(seq ${AB_ROUNDS:-1}); do
            for a in "${blks[@]}"; do
                for b in .devbuild/convfuse $(ls -d .devbuild/$bins 2>/dev/null); do
                    [ -x "$b" ] || continue
                    echo "--- $(basename $b): convfuse run $a"
                    timeout 200 $b run $a --iters ${AB_ITERS:-20} 2>&1 | grep -E "^time" | sed -E 's/ \(median.*//' || rc=1
                done
            done
        done 2>&1 | tee "$OUT/$step.txt" ;;
    latency)  # with .devbuild/base/ (python/ and libconvfuse.so of a baseline), that first, then this build
        if [ -d .devbuild/base ]; then
            echo "--- baseline"
            LATENCY_PYTHON=$PWD/.devbuild/base/python CONVFUSE_LIBRARY=$PWD/.devbuild/base/libconvfuse.so \
                timeout 300 python3 bench/latency.py ${LATENCY_ARGS:-} 2>&1 | tee "$OUT/latency_base.txt" || rc=1
            echo "--- this build"
        fi
        timeout 300 python3 bench/latency.py --out "$OUT/latency.json" ${LATENCY_ARGS:-} 2>&1 | tee "$OUT/latency.txt" || rc=1 ;;
    gram)  # training statistics: the CLIs of other commits (bench/ablate.sh ABLATE_BASE=<ref>, ABLATE_REFS) against
           # this build with its knobs (GRAM_KNOBS), alternating, CLI timing; then per-kernel GPU times of both knob ends
        for r in 1 2; do
            for k in $(cd .devbuild && ls -d ${GRAM_BINS:-convfuse_abl_*} 2>/dev/null) DEFAULT=1 ${GRAM_KNOBS:-CONVFUSE_PDL=0}; do
                b=.devbuild/convfuse; case $k in convfuse_abl_*) b=.devbuild/$k; k=DEFAULT=1 ;; esac
                [ -x "$b" ] || continue
                for a in "kb2-73 --mode train" ${GRAM_EVAL:+"kb2-73 --mode eval"}; do
                    echo "--- $(basename $b) $k: convfuse run $a"
                    env $k timeout 100 $b run $a --iters ${AB_ITERS:-40} 2>&1 | grep -E "^time|FAIL|rror" | sed -E 's/ \(median.*//' || rc=1
                done
            done
        done 2>&1 | tee "$OUT/gram.txt"
        for k in DEFAULT=1 CONVFUSE_PDL=0 ${GRAM_KERNEL_KNOBS:-}; do  # a knob set: VAR=v,VAR2=v2
            echo "--- kernels, $k"; env $(echo "$k" | tr , ' ') timeout 100 python3 bench/kernels.py kb2-73 128 20 2>&1 | tail -12
        done 2>&1 | tee -a "$OUT/gram.txt" ;;
    ncutrain)  # ncu of the training chain's small kernels (NCU_KERNELS regex), the baseline CLI and this build
        for b in .devbuild/convfuse_abl_base .devbuild/convfuse; do
            [ -x "$b" ] || continue
            echo "--- $(basename $b)"
            timeout 200 ncu --kernel-name "regex:${NCU_KERNELS:-finalize|gram_sum|gram_stats}" --launch-skip 6 --launch-count 3 \
                --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
                $b run kb2-73 --mode train --iters 3 2>&1 | grep -E "^  [a-z_:]+.*\(|Duration|Warp Cycles Per Issued|Stall|Block Size|Grid Size|Registers|Achieved Occ|Elapsed Cycles|SM Frequency" | head -60
        done 2>&1 | tee "$OUT/ncutrain.txt" ;;
    ncugram)  # ncu of the Gram kernel (this build, KB2-73 train): where its time goes
        timeout 200 ncu --kernel-name regex:cf_gram_kernel --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
            --section MemoryWorkloadAnalysis --section InstructionStats --section Occupancy \
            .devbuild/convfuse run kb2-73 --mode train --iters 3 > "$OUT/ncu_gram.txt" 2>&1 || rc=1
        grep -E "Duration|Throughput|Busy|Stall|Warp Cycles|Issued|Pipe|Bank|Hit Rate|Executed Ipc|Shared" "$OUT/ncu_gram.txt" | head -50 ;;
    report) timeout 560 python3 bench/report.py --out-dir "$OUT" ${REPORT_ARGS:-} 2>&1 | tail -40 || rc=1 ;;
    *) echo "unknown step $step"; rc=2 ;;
    esac
done
exit $rc
