#!/usr/bin/env bash
# Installs what nanscope's build, tests, benches and examples need (Debian/Ubuntu packages). Idempotent: it
# installs only the packages that are missing and runs `apt-get update` only when apt cannot find one of them.
#
#   bash tools/install-deps.sh            install what is missing
#   NANSCOPE_SKIP_DEPS=1 bash tools/...   do nothing (a machine set up by other means)
#
# libopenmpi-dev and openmpi-bin (Open MPI: mpicxx, mpirun) are for the multi-rank tests (tests/mpi); without
# them those tests report skipped and the library builds as before (only nanscope/mpi.hpp needs MPI).
# libtorch-dev is large; it is only needed for the LibTorch adapter tests and one benchmark row, and every
# build works without it (find_package(Torch QUIET)). python3-torch (PyTorch for Python) lets the test
# tree_torch_print_real compare the layer tree's torch-style strings with torch's own printing; without it that
# test reports SKIPPED. chromium runs the `nanscope report` page tests in a real headless browser (tests/report;
# skipped without it). libtomlplusplus-dev (toml++) is the independent reference the tests compare nanscope's own
# TOML reader with (nanscope/control.hpp needs no TOML library); without it that comparison is not compiled.
# zlib1g-dev is for the `nanscope` tool alone (its .npz reader inflates deflated members; the library never links
# zlib). build-essential brings dpkg-dev, whose dpkg-shlibdeps gives the .deb made by `cpack -G DEB` its Depends.
# A failure to install an optional package is reported but not fatal.
set -euo pipefail

if [[ "${NANSCOPE_SKIP_DEPS:-0}" == "1" ]]; then
  echo "install-deps: NANSCOPE_SKIP_DEPS=1, skipping"
  exit 0
fi

required=(build-essential cmake ninja-build python3 libfmt-dev libeigen3-dev doctest-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev zlib1g-dev libdlpack-dev python3-numpy libopenmpi-dev openmpi-bin)
optional=(libtorch-dev python3-torch chromium libtomlplusplus-dev)

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: not a Debian-like system (no dpkg/apt-get); install these yourself:" >&2
  echo "  ${required[*]} ${optional[*]}" >&2
  exit 0
fi

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing_from() {
  local p
  for p in "$@"; do
    is_installed "$p" || printf '%s\n' "$p"
  done
}

mapfile -t missing_required < <(missing_from "${required[@]}")
mapfile -t missing_optional < <(missing_from "${optional[@]}")
if [[ ${#missing_required[@]} -eq 0 && ${#missing_optional[@]} -eq 0 ]]; then
  echo "install-deps: all packages present"
  exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: missing packages (${missing_required[*]} ${missing_optional[*]}) and not root without sudo" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
apt_get=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Options::=--force-confdef
         -o Dpkg::Options::=--force-confold)

# Does apt know a candidate version for every package? If not, the package lists are missing or stale.
has_candidate() {
  local c
  c="$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')"
  [[ -n "$c" && "$c" != "(none)" ]]
}
need_update=0
for p in "${missing_required[@]}" "${missing_optional[@]}"; do
  if ! has_candidate "$p"; then
    need_update=1
    break
  fi
done
if [[ $need_update -eq 1 ]]; then
  echo "install-deps: apt-get update"
  "${apt_get[@]}" update
fi

if [[ ${#missing_required[@]} -gt 0 ]]; then
  echo "install-deps: installing ${missing_required[*]}"
  "${apt_get[@]}" install --no-install-recommends "${missing_required[@]}"
fi
for p in "${missing_optional[@]}"; do
  echo "install-deps: installing $p (optional, large)"
  if ! "${apt_get[@]}" install --no-install-recommends "$p"; then
    case "$p" in
      libtorch-dev) why="LibTorch tests and bench rows are skipped" ;;
      python3-torch) why="tree_torch_print_real is skipped" ;;
      chromium) why="the nanscope report browser tests (tests/report) are skipped" ;;
      libtomlplusplus-dev) why="the TOML reader is not compared with toml++ in the tests" ;;
      *) why="the tests that need it are skipped" ;;
    esac
    echo "install-deps: warning: could not install $p; $why" >&2
  fi
done
echo "install-deps: done"
