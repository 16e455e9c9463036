#!/usr/bin/env bash
# libFuzzer over the public API (tests/c/fuzz_api.c): descriptor + chain validation, plan creation and tiny CPU
# executions, under AddressSanitizer + UndefinedBehaviorSanitizer. Builds build-fuzz/ with clang (installed with
# apt-get when missing and running as root), writes a small seed corpus, fuzzes for FUZZ_SECONDS (default 60).
# Exits non-zero on a build failure or on any crash, leak, sanitizer report or broken invariant; the input that
# did it is saved as build-fuzz/artifacts/crash-* and replays with: build-fuzz/tests/c/fuzz_api <that file>.
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
B=build-fuzz

have_libfuzzer() {
    command -v clang >/dev/null || return 1
    local d
    d=$(mktemp -d) || return 1
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/t.c"
    clang -fsanitize=fuzzer,address,undefined "$d/t.c" -o "$d/t" >/dev/null 2>&1
    local rc=$?
    rm -rf "$d"
    return $rc
}

if ! have_libfuzzer; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== fuzz_api: installing clang + its sanitizer/libFuzzer runtime (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends clang libclang-rt-dev; } >/dev/null \
            || apt-get install -y clang || { echo "fuzz_api: FAILED: could not install clang"; exit 1; }
    fi
    have_libfuzzer || { echo "fuzz_api: FAILED: clang with -fsanitize=fuzzer is not available"; exit 1; }
fi

echo "== fuzz_api: build ($B/, $(clang --version | head -1))"
mkdir -p "$B"
CC=clang cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONVFUSE_CUDA=OFF -DCONVFUSE_LIBFUZZER=ON \
    -DCONVFUSE_SANITIZE=ON -DCONVFUSE_BUILD_CLI=OFF >"$B/configure.log" 2>&1 \
    || { cat "$B/configure.log"; echo "fuzz_api: FAILED: configure"; exit 1; }
cmake --build "$B" -j "$JOBS" --target fuzz_api >"$B/build.log" 2>&1 \
    || { tail -40 "$B/build.log"; echo "fuzz_api: FAILED: build"; exit 1; }

# Seeds in the byte format documented at the top of tests/c/fuzz_api.c (sizes: byte b -> b%12 - 1).
mkdir -p "$B/seeds" "$B/corpus" "$B/artifacts"
python3 - "$B/seeds" <<'EOF'
import os, sys
out = sys.argv[1]
def sz(v):  # take_i64 small value v in -1..10
    return v + 1
def desc(kind, n, ci, h, w, co, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw, bias=1, dtype=0, backend=0, math=0):
    return bytes([kind] + [sz(v) for v in (n, ci, h, w, co, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw)]
                 + [0, bias, dtype, backend, math])
data = bytes((i * 37 + 11) % 200 for i in range(600))  # input values; no NaN/Inf bytes
seeds = {
    # KB2-91-like: convT k3 s2 p1 op1 -> softmax, add_channel, mul_scalar(2.5), sigmoid; executed
    "kb91": desc(1, 2, 3, 4, 4, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1) + bytes([0, 4, 5, 0, 1, 3, 6, 1]) + data,
    # KB2-73-like: conv k3 -> batch_norm(train, eps 1e-5, momentum 0.1), mul_scalar(-1); executed
    "kb73": desc(0, 2, 3, 6, 6, 4, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1) + bytes([0, 2, 4, 0, 15, 14, 1, 2, 1]) + data,
    # cumulative batch_norm in inference + every elementwise op, no bias; executed with dropped op buffers
    "ops": desc(0, 1, 2, 5, 5, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, bias=0)
           + bytes([0, 9, 0, 3, 4, 1, 15, 2, 6, 7, 8, 9, 2, 4, 33]) + data,
    # dilation and strides, transposed, output_padding < dilation
    "dil": desc(1, 1, 2, 3, 5, 2, 2, 3, 1, 2, 0, 1, 2, 1, 3, 2) + bytes([0, 1, 7, 1]) + data,
    # invalid: output_padding too large, zero sizes, groups, dtype, backend, math
    "bad_outpad": desc(1, 1, 1, 3, 3, 1, 3, 3, 1, 1, 0, 0, 2, 0, 1, 1),
    "bad_dtype": desc(0, 1, 1, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, dtype=1, math=3),
    "bad_groups": desc(0, 1, 1, 4, 4, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1)[:16] + bytes([0xF2, 1, 0, 0, 0]),
    "huge": bytes([0, 0xEA, 0xE5, 4, 4, 0xE9, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 0, 1, 0, 0, 0]),
    # corrupted chains (white-box): length, kind
    "corrupt_len": desc(0, 1, 1, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1) + bytes([2, 2, 7, 8, 0xE5]),
    "corrupt_kind": desc(0, 1, 1, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1) + bytes([4, 2, 7, 8, 1, 0xEA]),
    # dst aliasing src, and a missing bias
    "alias": desc(0, 1, 2, 4, 4, 2, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1) + bytes([0, 0, 0x81]) + data,
    # regression: stride INT64_MAX with padding 2^31 overflowed the CPU loop bounds (fixed in reference.c)
    "huge_stride": bytes([9, 2, 3, 0x78, 0, 0, 0, 0x7e, 0xea, 0xe5, 0xe9, 0xe8, 0, 0, 0, 0, 0, 0x1b, 0, 0, 2, 0, 0,
                          0x21, 0x7a, 4, 0x4b, 0x4b]),
    "nobias": desc(0, 1, 2, 4, 4, 2, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1) + bytes([0, 0, 0x11]) + data,
}
for name, b in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(b)
EOF

echo "== fuzz_api: fuzzing for ${FUZZ_SECONDS} s"
# OpenMP off: one thread keeps runs deterministic and fast on tiny inputs.
OMP_NUM_THREADS=1 ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$B/tests/c/fuzz_api" -max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$B/artifacts/" "$B/corpus" "$B/seeds" >"$B/fuzz.log" 2>&1
rc=$?
runs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$B/fuzz.log" | tail -1)
cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$B/fuzz.log" | tail -1)
if [ "$rc" -ne 0 ]; then
    grep -E -A25 'ERROR|runtime error|invariant broken|deadly signal|Test unit written' "$B/fuzz.log" | head -80
    echo "fuzz_api: FAILED (exit $rc): $(ls "$B"/artifacts/ 2>/dev/null | head -3 | tr '\n' ' ')"
    echo "  replay: $B/tests/c/fuzz_api $B/artifacts/<file>; full log: $B/fuzz.log"
    exit 1
fi
echo "fuzz_api: ok, no crash: ${runs:-? runs}s; ${cov:-no coverage line}"
