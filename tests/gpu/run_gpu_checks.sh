#!/usr/bin/env bash
# Runs every GPU check and the kernel bench from prebuilt binaries, then prints a compact summary.
# Builds nothing. Usage (repository root, on the GPU machine):
#   tests/gpu/run_gpu_checks.sh [BIN_DIR]      # BIN_DIR default .gpu-data/bin, holding gpu_tests,
#                                              # gpu_kernel_bench, xinfer-bench and xinfer (each plain, .xz or .gz)
#                                              # from a -DXINFER_CUDA=ON -DXINFER_STATIC_DEPS=ON build
#                                              # (xinfer alone also serves as xinfer-bench)
# Then the engine benchmarks: `xinfer-bench bench` on Llama-3.1-8B-shaped dummy weights (batch-1 latency at
# 128 and 2048 prompt tokens (prefill MFU),
# 128/128 throughput) and the refusal of Llama-3.1-70B (does not fit one GPU); JSON results in $OUT.
# Then the serving benchmark (SERVE=0 skips it): `xinfer serve --backend cuda` on Llama-3.1-8B-shaped dummy
# weights with the llama3 tokenizer (TOKENIZER_DIR, default .gpu-data/llama3-tokenizer: tokenizer.json or
# tokenizer.json.gz + tokenizer_config.json, e.g. a copy of ../shared/tokenizers/llama3), loaded by
# bench/serve_bench.py at concurrency SERVE_CONCURRENCY (default "1 16 64 256"), 128-token-id prompts, 128
# output tokens, ignore_eos; results $OUT/results/serve_8b_c<N>.json. SERVE_ARGS adds serve flags,
# SERVE_BENCH_ARGS serve_bench flags (later ones win);
# SERVE_BASELINE=1 repeats the sweep with --prefill-tokens-per-decode 0 (the scheduler before issue 19 item 4)
# into serve_8b_c<N>_lever_off.json. SERVE_STEADY=1 adds a steady-state run (--warmup-overlap) at each c >= 64:
# serve_8b_c<N>_steady.json.
# Full logs go to $OUT (or /tmp/xinfer_gpu_checks). cuBLASLt is the one non-system shared library: it is
# looked up in the CUDA toolkit and in PyTorch's nvidia wheels.
set -u
BIN=${1:-.gpu-data/bin}
LOG=${OUT:-/tmp/xinfer_gpu_checks}
mkdir -p "$LOG"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [ -e "$d/libcublasLt.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
# Binaries travel xz- or gzip-compressed (the carry is limited to 64 MiB with the tree; strip, then xz -9e).
UNPACK=$(mktemp -d)  # not under $OUT: only logs and results travel back
mkdir -p "$UNPACK"
for f in gpu_tests gpu_kernel_bench xinfer-bench xinfer; do
  if [ -e "$BIN/$f.xz" ]; then xz -dc "$BIN/$f.xz" > "$UNPACK/$f" && chmod +x "$UNPACK/$f"
  elif [ -e "$BIN/$f.gz" ]; then gunzip -c "$BIN/$f.gz" > "$UNPACK/$f" && chmod +x "$UNPACK/$f"
  elif [ -e "$BIN/$f" ]; then cp "$BIN/$f" "$UNPACK/$f"; fi
done
BIN="$UNPACK"
# The portable `xinfer` (issue 19) holds the bench and logits commands too: it can stand in for xinfer-bench.
[ ! -e "$BIN/xinfer-bench" ] && [ -x "$BIN/xinfer" ] && ln -s xinfer "$BIN/xinfer-bench"
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
# GGUF on CUDA (Q4_1 repacked into the int4 kernels) against the CPU's float reference, on the tiny Q4_1 GGUF
# (needs numpy + safetensors; GGUF_CHECK_MODEL=M.gguf checks another file too, e.g. tools/truncate_gguf.py's cut
# of SmolLM2).
gg_rc=skipped
if [ -x "$BIN/xinfer" ] && python3 -c 'import numpy, safetensors' 2> /dev/null; then
  { timeout 120 python3 tests/gpu/check_gguf_cuda_vs_cpu.py --xinfer "$BIN/xinfer" --out "$LOG/gguf_check"
    gg_rc=$?
    if [ -n "${GGUF_CHECK_MODEL:-}" ]; then
      timeout 300 python3 tests/gpu/check_gguf_cuda_vs_cpu.py --xinfer "$BIN/xinfer" --gguf "$GGUF_CHECK_MODEL" \
        --out "$LOG/gguf_check_model" || gg_rc=$?
    fi; } > "$LOG/gguf_check.log" 2>&1
fi
# CHECK_8B=1: Llama-3.1-8B-shaped random model, `xinfer-bench logits` vs transformers bf16/f32 (needs torch +
# transformers; ~2 min; 16 GB temp model under /tmp). Table in $LOG/check_8b.txt.
c8_rc=skipped
if [ "${CHECK_8B:-0}" = 1 ]; then
  timeout 300 python3 tests/gpu/check_8b_vs_transformers.py --xinfer "$BIN/xinfer-bench" --out "$LOG" > "$LOG/check_8b.log" 2>&1
  c8_rc=$?
fi

# Serving benchmark: one server per sweep, every concurrency against it (warm-up requests first: CUDA graphs
# are captured on first use of each batch bucket).
serve_sweep() {  # serve_sweep SUFFIX [extra serve flags...]
  local suffix=$1; shift
  local port=${SERVE_PORT:-18000}
  "$BIN/xinfer" serve --backend cuda --model llama-3.1-8b --load-format dummy --tokenizer "$TOK" --port "$port" \
    --max-num-seqs 256 ${SERVE_ARGS:-} "$@" > "$LOG/serve${suffix}.log" 2>&1 &
  local pid=$!
  # A seed per concurrency: the server's prefix cache must not serve one run's prompts to the next.
  for c in ${SERVE_CONCURRENCY:-1 16 64 256}; do
    local n=$(( c * 4 < 64 ? 64 : c * 4 ))
    [ "$c" = 1 ] && n=32
    timeout 300 python3 bench/serve_bench.py --base-url "http://127.0.0.1:$port" --server-timeout 240 \
      --concurrency "$c" --num-prompts "$n" --warmup "$c" --input-len 128 --output-len 128 --ignore-eos \
      --id-high 128000 --no-progress --seed "$((1000 + c))" --label "llama-3.1-8b dummy, cuda, c=$c${suffix}" \
      --json "$LOG/results/serve_8b_c${c}${suffix}.json" ${SERVE_BENCH_ARGS:-} > "$LOG/serve_bench_c${c}${suffix}.log" 2>&1
    echo "c=$c$suffix: rc $?" >> "$LOG/serve_rc.txt"
    # SERVE_STEADY=1: the same concurrency measured in the steady state too (the measured requests start while
    # c streams already run: --warmup-overlap, as many warm-up requests as measured ones; issue 19 item 4).
    if [ "${SERVE_STEADY:-0}" = 1 ] && [ "$c" -ge 64 ]; then
      timeout 300 python3 bench/serve_bench.py --base-url "http://127.0.0.1:$port" --server-timeout 240 \
        --concurrency "$c" --num-prompts "$n" --warmup "$n" --warmup-overlap --input-len 128 --output-len 128 \
        --ignore-eos --id-high 128000 --no-progress --seed "$((2000 + c))" \
        --label "llama-3.1-8b dummy, cuda, c=$c steady${suffix}" --json "$LOG/results/serve_8b_c${c}_steady${suffix}.json" \
        ${SERVE_BENCH_ARGS:-} > "$LOG/serve_bench_c${c}_steady${suffix}.log" 2>&1
      echo "c=$c steady$suffix: rc $?" >> "$LOG/serve_rc.txt"
    fi
  done
  kill -TERM "$pid" 2>/dev/null; wait "$pid"
}
serve_rc=skipped
t5=$(date +%s)
if [ "${SERVE:-1}" = 1 ]; then
  TOKSRC=${TOKENIZER_DIR:-.gpu-data/llama3-tokenizer}
  TOK="$UNPACK/tokenizer"
  mkdir -p "$TOK" "$LOG/results"
  rm -f "$LOG/serve_rc.txt"
  if [ -e "$TOKSRC/tokenizer.json.gz" ]; then gunzip -c "$TOKSRC/tokenizer.json.gz" > "$TOK/tokenizer.json"
  elif [ -e "$TOKSRC/tokenizer.json" ]; then cp "$TOKSRC/tokenizer.json" "$TOK/"; fi
  cp "$TOKSRC/tokenizer_config.json" "$TOK/" 2>/dev/null
  if [ ! -x "$BIN/xinfer" ] || [ ! -e "$TOK/tokenizer.json" ]; then
    serve_rc="missing $BIN/xinfer or $TOKSRC/tokenizer.json(.gz)"
  else
    ldd "$BIN/xinfer" > "$LOG/xinfer_ldd.txt" 2>&1
    serve_sweep ""
    [ "${SERVE_BASELINE:-0}" = 1 ] && serve_sweep _lever_off --prefill-tokens-per-decode 0
    serve_rc=ran
  fi
fi
t6=$(date +%s)

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
if [ "$gg_rc" != skipped ]; then
  echo "==== GGUF on cuda vs the cpu's float reference (rc $gg_rc) ===="
  cat "$LOG/gguf_check.log"
fi
if [ "$c8_rc" != skipped ]; then
  echo "==== Llama-3.1-8B shape: xinfer vs transformers (rc $c8_rc) ===="
  if [ -e "$LOG/check_8b.txt" ]; then cat "$LOG/check_8b.txt"; else tail -20 "$LOG/check_8b.log"; fi
fi
if [ "$serve_rc" != skipped ]; then
  echo "==== serving: xinfer serve --backend cuda, Llama-3.1-8B shape, 128 in / 128 out token ids ($serve_rc, $((t6 - t5)) s) ===="
  grep -E "not found" "$LOG/xinfer_ldd.txt" 2>/dev/null
  grep -E "scheduler|engine: " "$LOG/serve.log" 2>/dev/null | head -2 | cut -c1-400
  python3 - "$LOG/results" <<'PY'
import glob, json, os, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "serve_8b_c*.json"))):
    s = json.load(open(f))["summary"]
    c = json.load(open(f))["config"]["concurrency"]
    rows.append((os.path.basename(f)[:-5], c, s))
rows.sort(key=lambda r: (r[0].endswith("lever_off"), r[1]))
print(f"{'run':<28} {'ok/fail':>8} {'tok/s':>9} {'TTFT p50/p99 ms':>18} {'ITL p50/p99 ms':>16} {'p99/p50 ITL':>11} {'TTFT':>5}")
for name, c, s in rows:
    t, i = s["ttft"], s["itl"]
    if not t["n"] or not i["n"]:
        print(f"{name:<28} {s['completed']}/{s['failed']} (no samples)")
        continue
    print(f"{name:<28} {s['completed']:>4}/{s['failed']:<3} {s['output_throughput']:9.0f} "
          f"{t['p50_ms']:8.1f} /{t['p99_ms']:7.1f} {i['p50_ms']:7.2f} /{i['p99_ms']:6.2f} "
          f"{i['p99_ms'] / i['p50_ms']:11.2f} {t['p99_ms'] / t['p50_ms']:5.2f}")
PY
  [ -e "$LOG/serve_rc.txt" ] && tr '\n' ' ' < "$LOG/serve_rc.txt" && echo
  grep -hE "error|Error" "$LOG"/serve_bench_c*.log 2>/dev/null | head -5
fi
echo "==== summary ===="
echo "gpu_tests: rc $tests_rc ($((t1 - t0)) s): $(grep -E '^\[  PASSED  \]|tests? ran' "$LOG/gpu_tests.log" | tr '\n' ' ')$(grep -c '^\[  FAILED  \]' "$LOG/gpu_tests.log") FAILED lines"
echo "memcheck: rc $san_rc ($((t2 - t1)) s); kernel bench: rc $bench_rc ($((t3 - t2)) s); engine bench: latency rc $lat_rc, throughput rc $thr_rc ($((t4 - t3)) s)"
