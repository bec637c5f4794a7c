#!/usr/bin/env bash
# The real browser for tests/test_http_page_browser.py: Debian's chromium (driven by Playwright
# through executable_path; nothing downloads a browser build). Idempotent.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
command -v chromium >/dev/null
