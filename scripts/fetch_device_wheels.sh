#!/usr/bin/env bash
# Wheels the GPU benchmark machine's image lacks for running the services (it has torch, triton,
# transformers, safetensors, numpy, grpcio, protobuf, but nothing can be installed from an index
# there). Downloads them into .whl/ (git-ignored; carry it with the device call), for the image's
# CPython 3.12 on x86_64. benchmarks/run_gpu_suite.sh installs them from there with --no-index.
# What the benchmark paths import, voice cloning included: librosa (resampling, mel filters) and
# the pure-Python packages it needs that the image lacks (it has numba, scipy, scikit-learn); the
# gateway's HTTP face (starlette, uvicorn, websockets), the gateway's event loop (uvloop) and httpx for
# bench_http_vs_grpc.py.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PY=${PYTHON:-python3}
common=(--only-binary=:all: --no-deps --dest .whl --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
        --platform any)
"$PY" -m pip download "${common[@]}" \
  "pyzmq==27.3.0" "grpcio==1.85.1" "grpcio-health-checking==1.85.1" "grpcio-reflection==1.85.1" \
  "protobuf==7.35.1" "soundfile>=0.12" "cffi>=1.17" "pycparser" "soxr>=0.3" "prometheus_client>=0.20" \
  "pytest-timeout==2.4.0" "pytest>=8" "pluggy>=1.5" "iniconfig" "packaging" \
  "librosa>=0.10" "audioread" "pooch" "decorator" "lazy_loader" "msgpack" "platformdirs" \
  "starlette>=0.40" "uvicorn>=0.30" "websockets>=13" "python-multipart>=0.0.9" "click" "h11" "anyio" "sniffio" \
  "idna" "typing_extensions" "httpx>=0.27" "httpcore" "certifi" "uvloop>=0.19"
du -sh .whl && ls .whl
