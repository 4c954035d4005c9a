#!/usr/bin/env bash
# Idempotent setup: checks the toolchains, builds the venv (.venv/), the Go binaries (bin/)
# and caches the Kafka broker jars outside the repo. Called by `make setup`, `make demo`, `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'setup: %s\n' "$*" >&2; exit 1; }
step() { printf '==> %s\n' "$*"; }

# --- prerequisites ----------------------------------------------------------------------------
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for cand in python3.11 python3.12 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(0 if (3,11) <= sys.version_info[:2] < (3,13) else 1)' 2>/dev/null; then
      PYTHON=$(command -v "$cand"); break
    fi
  done
fi
[ -n "$PYTHON" ] || die "Python 3.11 or 3.12 is required (install python3.11 and python3.11-venv, or set PYTHON=/path/to/python3.11)"
command -v go >/dev/null 2>&1 || die "Go 1.22+ is required to build the edge binaries (install golang, or put go on PATH)"
command -v java >/dev/null 2>&1 || die "Java 17+ is required for the local Kafka broker (apt-get install openjdk-17-jre-headless)"
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[ "${java_major:-0}" -ge 17 ] || die "Java 17+ is required for Kafka 4.x, found '${java_major:-none}'"
command -v mvn >/dev/null 2>&1 || die "Maven is required once, to fetch the Kafka jars from Maven Central (apt-get install maven)"

# --- Debian packages the real-component tests need ------------------------------------------------
# nginx (real access logs), ip/tc (network namespaces, tbf bottlenecks), curl (a real client),
# nft (random loss in the lab's bottleneck), chromium (renders the canary report headless in tests),
# prometheus (promtool: `make test-prometheus` checks and unit-tests deploy/prometheus/) and
# prometheus-alertmanager (/usr/bin/prometheus-alertmanager, amtool: the Alertmanager client's tests),
# clang + libbpf-dev + bpftool (`make bpf`/`make bpf-check` compile rollout/bpf/ with bpf2go; the
# objects are committed, so building and running ccab does not need them).
# Installed without starting the packaged services (policy-rc.d): tests run their own nginx in
# namespaces and their own Alertmanager on a loopback port.
need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
# clang, llvm, libbpf-dev and bpftool: `make bpf` / `make bpf-check` regenerate the committed BPF
# objects (rollout/bpf/); building and testing ccab uses the committed ones.
command -v clang >/dev/null 2>&1 || need+=(clang llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v bpftool >/dev/null 2>&1 || [ -x /usr/sbin/bpftool ] || need+=(bpftool)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "debian packages: ${need[*]}"
    policy=/usr/sbin/policy-rc.d
    created_policy=0
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; created_policy=1; fi
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
      || { [ $created_policy = 1 ] && rm -f "$policy"; die "apt-get install ${need[*]} failed"; }
    [ $created_policy = 1 ] && rm -f "$policy"
  else
    printf 'setup: warning: %s not installed and not root with apt-get: the tests that need them will be skipped\n' "${need[*]}" >&2
  fi
fi

# --- Python venv --------------------------------------------------------------------------------
stamp=.venv/.ccab-setup-stamp
UV_VERSION=0.13.9  # the installer of the venv (not a dependency of ccab)
want=$( (cat requirements.lock pyproject.toml; echo "uv $UV_VERSION") | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  step "python venv (.venv) from requirements.lock"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv || die "could not create .venv (on Debian: apt-get install python3-venv)"
  # uv installs the lock's exact versions like pip, in seconds instead of minutes (2.5 s vs
  # 2m36s with warm caches, 46 s from empty ones); pip does it when uv cannot be had
  if .venv/bin/pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" && [ -x .venv/bin/uv ]; then
    .venv/bin/uv pip install --quiet --python .venv/bin/python -r requirements.lock
    .venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -e .
  else
    printf 'setup: warning: could not install uv %s; installing with pip (slower)\n' "$UV_VERSION" >&2
    .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.lock
    .venv/bin/pip install --quiet --disable-pip-version-check --no-deps -e .
  fi
  echo "$want" > "$stamp"
else
  step "python venv up to date"
fi

# --- Go binaries ----------------------------------------------------------------------------------
if [ -f go.mod ]; then
  step "go build -> bin/"
  mkdir -p bin
  pkgs=""
  for dir in collectors/cmd rollout/cmd lab/cmd; do
    [ -d "$dir" ] && pkgs="$pkgs $(go list "./$dir/..." || die "go list ./$dir/... failed")"
  done
  [ -n "$pkgs" ] || die "no Go commands found under collectors/cmd or rollout/cmd"
  # shellcheck disable=SC2086
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/ $pkgs || die "go build failed (see above)"
fi

# --- Kafka jars (cached outside the repo) ---------------------------------------------------------
step "kafka broker jars"
.venv/bin/ccab kafka install
step "setup done"
