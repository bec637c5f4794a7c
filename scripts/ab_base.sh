#!/usr/bin/env bash
# Packs COMMIT's tree as build/base.tar (and its id as build/base.commit) for the GPU suite's
# e2e-ab piece, which runs the stack of that tree against the working tree on one machine:
#   bash scripts/ab_base.sh 63311e6
# then, with the device tool: bash benchmarks/run_gpu_suite.sh e2e-ab   (carry: build, .whl)
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${1:?usage: scripts/ab_base.sh COMMIT}
mkdir -p build
# the stack and the benches only: past results and docs (~28 MB) would push the device tool's carry
# (working tree + build + .whl) over its 64 MiB
git archive "$commit" -o build/base.tar -- . ':(exclude)benchmarks/results' ':(exclude)docs'
git rev-parse --short "$commit" > build/base.commit
echo "build/base.tar: $(cat build/base.commit) ($(du -h build/base.tar | cut -f1))"
