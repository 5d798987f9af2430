#!/usr/bin/env bash
# The portability check of the Python package on a machine whose toolchain differs from the
# developers' (the GPU image: Ubuntu 24.04, GCC 13 linking libstdc++ statically, Python 3.12, a
# CUDA build of torch). Builds the package as that image allows, then runs every Python test file
# but the CLI's (they need the C++ tool and its Debian dependencies) in its own interpreter under
# faulthandler, so one crash does not hide the next. Writes the log to $1 (default: stdout).
set -uo pipefail
log=${1:-/dev/stdout}
site=${REMAT_SITE:-/tmp/site}
{
  echo "== toolchain"
  uname -m; python3 --version; ${CXX:-g++} --version | head -1; cmake --version | head -1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  echo "== build"
  rm -rf "$site"
  start=$(date +%s)
  if ! python3 -m pip install -q --no-build-isolation --no-deps --target "$site" . 2>&1 | tail -20; then
    echo "build failed"
  fi
  echo "build seconds: $(($(date +%s) - start))"
  so=$(ls "$site"/remat/_core*.so 2>/dev/null | head -1)
  echo "module: $so"
  echo "libstdc++ linked dynamically: $(ldd "$so" 2>/dev/null | grep -c libstdc++)"
  export PYTHONPATH=$site
  echo "== error path"
  python3 -X faulthandler -c "
import remat
try:
    remat.solve([1, -1], [1, 1], 1)
except remat.InputError as e:
    print('InputError:', e)
"
  echo "rc=$?"
  echo "== tests"
  failed=0
  for file in tests/python/test_*.py; do
    case "$file" in *test_cli*) continue ;; esac
    case " ${REMAT_SKIP_TESTS:-} " in *" $(basename "$file" .py) "*) echo "$file: skipped"; continue ;; esac
    start=$(date +%s)
    out=$(python3 -X faulthandler -m pytest -q -p no:cacheprovider "$file" 2>&1)
    rc=$?
    echo "$file: rc=$rc in $(($(date +%s) - start)) s: $(printf '%s\n' "$out" | tail -1)"
    if [ $rc -ne 0 ]; then
      failed=1
      printf '%s\n' "$out" | tail -60
    fi
  done
  echo "== done: $([ $failed -eq 0 ] && echo all passed || echo failures)"
} >"$log" 2>&1
