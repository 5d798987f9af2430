#!/usr/bin/env bash
# The third H200 run: op-level benchmark, first-step figures with op-level plans, and the
# portability suite on the GCC 13 image after the merges, and torch.compile to byte budgets. Writes everything under $1.
set -uo pipefail
out=${1:?out dir}
mkdir -p "$out/ops" "$out/first"
rm -rf /tmp/site
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/site . >"$out/build.log" 2>&1 || tail -20 "$out/build.log"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 240 python3 bench/eager_ops.py --device cuda --repeats 5 --budgets 4 --out "$out/ops" >"$out/ops.log" 2>&1
echo "eager_ops rc=$?"
REMAT_SKIP_TESTS="test_torch_compile test_properties test_torch_parity test_source_rules test_distributed test_build_options test_torch_versions test_torch_knapsack_cases" \
  timeout 120 bash tests/device/portability.sh "$out/portability.log"
echo "portability rc=$?"; grep -E "rc=|done" "$out/portability.log" | tail -12
# torch.compile byte budgets (issue 14): predicted against max_memory_allocated, inductor, bf16
timeout 200 python3 bench/compile_budget.py --device cuda --steps 5 --models "" \
  --inductor-models llama,gpt --out "$out/compile" >"$out/compile.log" 2>&1
echo "compile_budget rc=$?"; tail -40 "$out/compile/README_cuda.md" 2>/dev/null || tail -20 "$out/compile.log"
timeout 90 python3 bench/eager_first_step.py --device cuda --steps 3 --models llama --out "$out/first" >"$out/first.log" 2>&1
echo "first_step rc=$?"
tail -30 "$out/ops/README_cuda.md" 2>/dev/null || tail -30 "$out/ops.log"
