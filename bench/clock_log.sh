#!/usr/bin/env bash
# Runs a command with the GPU's SM clock, power draw and clock-event reasons logged beside it (nvidia-smi every
# INTERVAL_MS, default 50), then prints what the card ran at while the command ran: SM clock percentiles, power
# percentiles, and the share of samples with the software power cap (reason bit 0x4) or a thermal slowdown
# (0x20 | 0x40) active. Session 31 found the compute-heavy engine rows running at the 700 W cap at ~1,455 MHz
# instead of the 1,980 MHz boost (docs/PERF.md "Session 31"); this is the tool behind such figures.
#
#   bench/clock_log.sh CSV -- COMMAND [ARGS...]
#   e.g. bench/clock_log.sh $OUT/clocks_2048_128.csv -- xinfer bench --model llama-3.1-8b --load-format dummy \
#          --quantization fp8 --kv-cache-dtype fp8 --input-len 2048 --output-len 128 --num-prompts 300
#
# Exits with the command's status. GPU index: CUDA_VISIBLE_DEVICES's first entry, else 0.
set -u
if [ $# -lt 3 ] || [ "$2" != "--" ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
csv=$1
shift 2
gpu=${CUDA_VISIBLE_DEVICES:-0}
gpu=${gpu%%,*}
if ! command -v nvidia-smi > /dev/null; then
  echo "clock_log: nvidia-smi not found" >&2
  exit 2
fi
nvidia-smi -i "$gpu" --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms "${INTERVAL_MS:-50}" > "$csv" 2>&1 &
smi=$!
trap 'kill "$smi" 2> /dev/null' EXIT  # also when this script is stopped (a device run's time limit)
"$@"
rc=$?
kill "$smi" 2> /dev/null
wait "$smi" 2> /dev/null
python3 - "$csv" << 'PY'
import sys

clocks, power, capped, thermal = [], [], 0, 0
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    if len(f) < 6:
        continue
    try:
        clock, watts, reasons = float(f[1]), float(f[3]), int(f[5], 16)
    except ValueError:
        continue
    clocks.append(clock)
    power.append(watts)
    capped += bool(reasons & 0x4)
    thermal += bool(reasons & 0x60)
if not clocks:
    sys.exit(f"clock_log: no samples in {sys.argv[1]}")


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


n = len(clocks)
print(f"clock_log: {n} samples; SM clock MHz p10/p50/p90 {pct(clocks, .1):.0f}/{pct(clocks, .5):.0f}/"
      f"{pct(clocks, .9):.0f}; power W p10/p50/p90 {pct(power, .1):.0f}/{pct(power, .5):.0f}/{pct(power, .9):.0f}; "
      f"software power cap active {100 * capped / n:.0f}% of samples, thermal slowdown {100 * thermal / n:.0f}%")
PY
exit $rc
