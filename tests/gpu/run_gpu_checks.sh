#!/usr/bin/env bash
# Runs every GPU check and the kernel bench from prebuilt binaries, then prints a compact summary.
# Builds nothing. Usage (repository root, on the GPU machine):
#   tests/gpu/run_gpu_checks.sh [BIN_DIR]      # BIN_DIR default .gpu-data/bin, holding gpu_tests,
#                                              # gpu_kernel_bench and xinfer-bench (each plain or .gz) from a
#                                              # -DXINFER_CUDA=ON -DXINFER_STATIC_DEPS=ON build
# Then the engine benchmarks: `xinfer-bench bench` on Llama-3.1-8B-shaped dummy weights (batch-1 latency at
# 128 and 2048 prompt tokens (prefill MFU),
# 128/128 throughput) and the refusal of Llama-3.1-70B (does not fit one GPU); JSON results in $OUT.
# Full logs go to $OUT (or /tmp/xinfer_gpu_checks). cuBLASLt is the one non-system shared library: it is
# looked up in the CUDA toolkit and in PyTorch's nvidia wheels.
set -u
BIN=${1:-.gpu-data/bin}
LOG=${OUT:-/tmp/xinfer_gpu_checks}
mkdir -p "$LOG"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [ -e "$d/libcublasLt.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
# Binaries travel gzip-compressed (the carry is limited; OpenBLAS compresses ~4x).
UNPACK=$(mktemp -d)  # not under $OUT: only logs and results travel back
mkdir -p "$UNPACK"
for f in gpu_tests gpu_kernel_bench xinfer-bench; do
  if [ -e "$BIN/$f.gz" ]; then gunzip -c "$BIN/$f.gz" > "$UNPACK/$f" && chmod +x "$UNPACK/$f"
  elif [ -e "$BIN/$f" ]; then cp "$BIN/$f" "$UNPACK/$f"; fi
done
BIN="$UNPACK"
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader 2>&1 | head -1

t0=$(date +%s)
timeout 300 "$BIN/gpu_tests" --gtest_color=no > "$LOG/gpu_tests.log" 2>&1
tests_rc=$?
t1=$(date +%s)

# Out-of-bounds / uninitialized-read check of the attention kernels on a few cases (slow under the tool).
san_rc=skipped
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then  # MEMCHECK=0 skips it
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/gpu_tests" --gtest_color=no \
    --gtest_filter='Cases/PagedAttentionTest.MatchesCpu/decode_gqa4_d128_bs16:Cases/PagedAttentionTest.MatchesCpu/decode_b3_gqa8_d128_bs32_peaky:Cases/PagedAttentionTest.MatchesCpu/mixed_gqa4_d128_bs16:Cases/PagedAttentionTest.MatchesCpu/prefill_gqa4_d128_bs16:Cases/PagedAttentionTest.MatchesCpu/prefill_prefix_gqa4_d64:Cases/PagedAttentionTest.MatchesCpu/generic_d16_mixed:Shapes/RopeKvWriteTest.*:Cases/RopeAttentionTest.FusedEqualsComposition/b1_gqa4_d128_bs16_2049:Cases/RopeAttentionTest.FusedEqualsComposition/b3_gqa16_d128_bs16:Cases/RopeAttentionTest.FusedEqualsComposition/b7_gqa4_d128_bs16_padded:Shapes/GemvFusionTest.*/m7_n33_k64_bias:Shapes/GemvFusionTest.*/m11_n300_k1032_bias:GemvFusionGraphTest.*:Models/ModelTest.MixedStepMatchesCpu/synthetic_d128:CudaGraphs.PipelinedGreedyStepsFeedDeviceIds' \
    > "$LOG/memcheck.log" 2>&1
  san_rc=$?
fi
t2=$(date +%s)

timeout 150 "$BIN/gpu_kernel_bench" ${KERNEL_BENCH_ARGS:-} > "$LOG/bench.log" 2>&1
bench_rc=$?
t3=$(date +%s)

# Engine benchmarks (xinfer bench) on dummy Llama-3.1-8B weights.
eb=(timeout 100 "$BIN/xinfer-bench" bench --model llama-3.1-8b --load-format dummy --no-progress --output-dir "$LOG/results")
"${eb[@]}" --latency --input-len 128 --output-len 128 --num-iters 3 > "$LOG/engine_latency.log" 2>&1
lat_rc=$?
"${eb[@]}" --latency --input-len 2048 --output-len 8 --num-iters 3 --name llama-3.1-8b_cuda_latency_2048 \
  > "$LOG/engine_latency_2048.log" 2>&1
lat2k_rc=$?
"${eb[@]}" --input-len 128 --output-len 128 --num-prompts ${THROUGHPUT_PROMPTS:-1000} ${THROUGHPUT_ARGS:-} > "$LOG/engine_throughput.log" 2>&1
thr_rc=$?
# EXTRA_SHAPES="IN/OUT:PROMPTS ..." adds throughput runs, e.g. EXTRA_SHAPES="2048/128:256 2048/2048:200".
for spec in ${EXTRA_SHAPES:-}; do
  io=${spec%%:*}; n=${spec##*:}; in=${io%%/*}; out=${io##*/}
  timeout 400 "$BIN/xinfer-bench" bench --model llama-3.1-8b --load-format dummy --no-progress --output-dir "$LOG/results" \
    --input-len "$in" --output-len "$out" --num-prompts "$n" ${THROUGHPUT_ARGS:-} \
    --name "llama-3.1-8b_cuda_throughput_${in}_${out}" > "$LOG/engine_throughput_${in}_${out}.log" 2>&1
  echo "extra shape $io x $n: rc $?" >> "$LOG/extra_shapes.txt"
done
# ENGINE_EAGER=1: the same two runs with --enforce-eager (no CUDA graphs), for before/after figures.
lat_e_rc=skipped; thr_e_rc=skipped
if [ "${ENGINE_EAGER:-0}" = 1 ]; then
  "${eb[@]}" --enforce-eager --latency --input-len 128 --output-len 128 --num-iters 3 \
    --name llama-3.1-8b_cuda_latency_eager > "$LOG/engine_latency_eager.log" 2>&1
  lat_e_rc=$?
  "${eb[@]}" --enforce-eager --input-len 128 --output-len 128 --num-prompts ${THROUGHPUT_PROMPTS:-1000} \
    --name llama-3.1-8b_cuda_throughput_eager > "$LOG/engine_throughput_eager.log" 2>&1
  thr_e_rc=$?
fi
timeout 60 "$BIN/xinfer-bench" bench --model llama-3.1-70b --no-progress --output-dir "$LOG/results" > "$LOG/engine_70b.log" 2>&1
r70_rc=$?
t4=$(date +%s)
# CHECK_8B=1: Llama-3.1-8B-shaped random model, `xinfer-bench logits` vs transformers bf16/f32 (needs torch +
# transformers; ~2 min; 16 GB temp model under /tmp). Table in $LOG/check_8b.txt.
c8_rc=skipped
if [ "${CHECK_8B:-0}" = 1 ]; then
  timeout 300 python3 tests/gpu/check_8b_vs_transformers.py --xinfer "$BIN/xinfer-bench" --out "$LOG" > "$LOG/check_8b.log" 2>&1
  c8_rc=$?
fi

echo "==== failures (gpu_tests) ===="
grep -E "^\[  FAILED  \]|Failure|error:|Check failed|CHECK" "$LOG/gpu_tests.log" | head -40
echo "==== attention kernels vs cpu ===="
grep "^\[ attention \]" "$LOG/gpu_tests.log"
echo "==== models ===="
grep "^\[ model \]" "$LOG/gpu_tests.log"
echo "==== batched / chunked / preempted vs solo ===="
grep "^\[ equiv \]" "$LOG/gpu_tests.log"
echo "==== cuda graphs ===="
grep "^\[ graphs \]" "$LOG/gpu_tests.log"
echo "==== memcheck (rc $san_rc) ===="
grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$LOG/memcheck.log" 2>/dev/null | tail -4
sed -n '/==== gpu_kernel_bench summary/,$p' "$LOG/bench.log"
[ $bench_rc -ne 0 ] && tail -20 "$LOG/bench.log"
echo "==== xinfer bench (engine, Llama-3.1-8B shape, dummy weights) ===="
grep -E "memory plan|ceilings on" "$LOG/engine_latency.log" | sed 's/^.*engine: //' | head -2
grep -E "^latency|^  decode|^  prefill" "$LOG/engine_latency.log"
grep -E "^latency|^  prefill" "$LOG/engine_latency_2048.log"
grep -E -A4 "^shape" "$LOG/engine_throughput.log"
for spec in ${EXTRA_SHAPES:-}; do
  io=${spec%%:*}; in=${io%%/*}; out=${io##*/}
  grep -E -A4 "^shape" "$LOG/engine_throughput_${in}_${out}.log" | tail -4
done
[ -e "$LOG/extra_shapes.txt" ] && cat "$LOG/extra_shapes.txt"
if [ "${ENGINE_EAGER:-0}" = 1 ]; then
  echo "---- the same with --enforce-eager (rc $lat_e_rc / $thr_e_rc) ----"
  grep -E "^latency|^  decode|^  prefill" "$LOG/engine_latency_eager.log"
  grep -E -A1 "^shape" "$LOG/engine_throughput_eager.log"
fi
[ $lat_rc -ne 0 ] && tail -5 "$LOG/engine_latency.log"
[ $thr_rc -ne 0 ] && tail -5 "$LOG/engine_throughput.log"
echo "70B (expected refusal, rc $r70_rc): $(tail -1 "$LOG/engine_70b.log" | cut -c1-300)"
if [ "$c8_rc" != skipped ]; then
  echo "==== Llama-3.1-8B shape: xinfer vs transformers (rc $c8_rc) ===="
  if [ -e "$LOG/check_8b.txt" ]; then cat "$LOG/check_8b.txt"; else tail -20 "$LOG/check_8b.log"; fi
fi
echo "==== summary ===="
echo "gpu_tests: rc $tests_rc ($((t1 - t0)) s): $(grep -E '^\[  PASSED  \]|tests? ran' "$LOG/gpu_tests.log" | tr '\n' ' ')$(grep -c '^\[  FAILED  \]' "$LOG/gpu_tests.log") FAILED lines"
echo "memcheck: rc $san_rc ($((t2 - t1)) s); kernel bench: rc $bench_rc ($((t3 - t2)) s); engine bench: latency rc $lat_rc, throughput rc $thr_rc ($((t4 - t3)) s)"
