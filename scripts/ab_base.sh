#!/usr/bin/env bash
# Packs COMMIT's tree as build/base.tar (and its id as build/base.commit) for the GPU suite's
# e2e-ab piece, which runs the stack of that tree against the working tree on one machine:
#   bash scripts/ab_base.sh 63311e6
# then, with the device tool: bash benchmarks/run_gpu_suite.sh e2e-ab   (carry: build, .whl)
# A second argument names the pack (default base): `scripts/ab_base.sh COMMIT head` writes
# build/head.tar, which the e2e-gapless piece runs as its head side instead of the working tree
# (a working tree shared with other work in progress is not the commit being measured).
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${1:?usage: scripts/ab_base.sh COMMIT [NAME]}
name=${2:-base}
mkdir -p build
# the stack and the benches only: past results and docs (~28 MB) would push the device tool's carry
# (working tree + build + .whl) over its 64 MiB
git archive "$commit" -o "build/$name.tar" -- . ':(exclude)benchmarks/results' ':(exclude)docs'
git rev-parse --short "$commit" > "build/$name.commit"
echo "build/$name.tar: $(cat "build/$name.commit") ($(du -h "build/$name.tar" | cut -f1))"
