#!/usr/bin/env bash
# One device call runs every GPU benchmark of the foundation + talker-model issues; results land in
# $OUT (the device tool copies them back). Usage on the device machine, from the repo root:
#   bash benchmarks/run_gpu_suite.sh [snake|decoder|talker ...]
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bench-out}; mkdir -p "$OUT"
which=${*:-snake decoder talker}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
for w in $which; do
  case $w in
    snake)   python3 benchmarks/bench_snakebeta.py --out "$OUT/snakebeta.json" 2>&1 | tee "$OUT/snakebeta.log" ;;
    decoder) python3 benchmarks/bench_decoder.py --out "$OUT/decoder.json" 2>&1 | tee "$OUT/decoder.log" ;;
    talker)  python3 benchmarks/bench_talker.py --out "$OUT/talker.json" 2>&1 | tee "$OUT/talker.log" ;;
    *) echo "unknown benchmark $w" ;;
  esac
done
