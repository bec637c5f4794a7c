#!/usr/bin/env bash
# The Triton kernel tests under the GPU machine's image versions, on a CPU machine, with no device
# time: Python 3.12, torch 2.11.0+cu130 (the image's own build: it imports without a GPU), triton
# 3.6.0, numpy 2.5.2. CI pins triton 3.9 / numpy 2.4, whose interpreter differs (triton 3.6's
# rounds tl.fma twice and needs a fix backported for numpy >= 2.4, see tests/triton_support.py),
# so a kernel change that passes CI can still fail `benchmarks/run_gpu_suite.sh kernels` there.
# Not part of CI: the venv takes ~5 GB (torch's CUDA libraries come with it) and ~1 min to build.
#
#   bash scripts/gpuimage_kernel_tests.sh [pytest args]   # default: the suite's kernel test files
#
# GPUIMAGE_VENV (default /work/venvs/gpuimage) is built once and reused; GPUIMAGE_PYTHON names a
# Python 3.12 interpreter (numpy 2.5 needs >= 3.12; default: python3.12, else pyenv's newest 3.12).
# The CUDA-only cases skip here ("needs a CUDA GPU"); the interpreter cases all run.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GPUIMAGE_VENV:-/work/venvs/gpuimage}
PINS=(torch==2.11.0 triton==3.6.0 numpy==2.5.2 pytest pytest-timeout safetensors)

find_python() {
  if [ -n "${GPUIMAGE_PYTHON:-}" ]; then echo "$GPUIMAGE_PYTHON"; return; fi
  if command -v python3.12 >/dev/null && python3.12 -V >/dev/null 2>&1; then command -v python3.12; return; fi
  local found
  found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -1)
  [ -n "$found" ] || { echo "no Python 3.12: set GPUIMAGE_PYTHON" >&2; exit 1; }
  echo "$found"
}

if ! "$VENV/bin/python" -c 'import torch, triton, numpy, pytest_timeout, safetensors' 2>/dev/null; then
  "$(find_python)" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --progress-bar off "${PINS[@]}"
fi
"$VENV/bin/python" -c 'import sys, numpy, torch, triton; print("python", sys.version.split()[0], "torch",
  torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__)'

# The same files, in the same way, as the kernels piece of benchmarks/run_gpu_suite.sh.
KERNEL_TESTS=(tests/test_snakebeta.py tests/test_rmsnorm.py tests/test_add_rmsnorm.py tests/test_qk_norm_rope.py tests/test_qk_norm_rope_write_kv.py tests/test_qk_norm_rope_write_kv_routing.py
              tests/test_silu_mul.py tests/test_silu_mul_routing.py tests/test_gumbel_pick.py tests/test_warp_pick.py tests/test_sample_rows.py tests/test_noise_keys.py
              tests/test_slot_attention.py tests/test_talker_launches.py tests/test_small_m_linear.py tests/test_small_m_linear_routing.py)
[ $# -gt 0 ] || set -- "${KERNEL_TESTS[@]}"
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
