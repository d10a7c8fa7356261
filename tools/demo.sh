#!/usr/bin/env bash
# Builds and runs the nanscope demo (examples/demo.cpp) in a Release build tree, build/demo.
#   bash tools/demo.sh [demo arguments...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/install-deps.sh
cmake --preset demo
cmake --build --preset demo -j "${NANSCOPE_JOBS:-2}" --target nanscope_demo

demo="$(find build/demo -type f -name nanscope_demo -perm -u+x -print -quit)"
if [[ -z "$demo" ]]; then
  echo "demo.sh: nanscope_demo was not built (is examples/CMakeLists.txt there?)" >&2
  exit 1
fi
exec "$demo" "$@"
