#!/usr/bin/env bash
# Every GPU measurement the open issues wait for, in one run that fits one device call (at most
# 10 minutes; each step has its own timeout, 530 s in all, and the build about a minute):
#   issue 50: memory_budget as the step's peak against HF checkpointing, Llama d=2048 seq 2048
#             bf16 (bench/step_budget.py), and under FSDP2 on one rank with NCCL
#             (bench/fsdp_step_budget.py);
#   issue 52: remat.torch.estimate with device="cuda" against max_memory_allocated and the
#             measured recompute, Llama-style d=2048 seq 2048 bf16 (bench/estimate.py);
#             an optimizer's footprint predicted on fake CUDA tensors against real steps
#             (tests/python/test_optimizer_footprint.py; use(optimizer=) and estimate use it),
#             and the fake grouped matmul in float32 against CUDA's (test_estimate.py);
#             auto_checkpoint(first_step="trace") against a measured first step
#             (bench/first_step_trace.py: first-step time and peak, later steps);
#   issue 38: offloading in eager PyTorch (bench/offload.py, Llama-style d=2048 seq 2048 bf16)
#             and under torch.compile (bench/compile_offload.py);
#   issue 36: the zoo against HF gradient checkpointing at realistic sizes (bench/zoo.py);
#   issue 13: the third H200 run's op-level figures, first step and compile budgets, and the
#             portability suite (tests/device/h200_run3.sh, its steps with shorter timeouts).
# The most wanted first: a step cut short by its timeout still leaves the others' reports.
# Usage (device tool): bash tests/device/gpu_pending.sh "$OUT"; reports land under $OUT.
set -uo pipefail
out=${1:?out dir}
mkdir -p "$out/step_budget" "$out/fsdp" "$out/estimate" "$out/offload" "$out/zoo" "$out/ops" "$out/first" "$out/compile"
rm -rf /tmp/site
start=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/site . >"$out/build.log" 2>&1 ||
  tail -20 "$out/build.log"
echo "build $(($(date +%s) - start)) s"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

step() {  # step NAME SECONDS COMMAND...
  local name=$1 seconds=$2
  shift 2
  local began=$(date +%s)
  timeout "$seconds" "$@" >"$out/$name.log" 2>&1
  echo "$name rc=$? in $(($(date +%s) - began)) s"
}

step step_budget 60 python3 bench/step_budget.py --device cuda --out "$out/step_budget/cuda"
step fsdp_step_budget 30 python3 bench/fsdp_step_budget.py --device cuda --out "$out/fsdp/cuda"
step estimate 45 python3 bench/estimate.py --device cuda --out "$out/estimate"
step footprint 20 python3 -m pytest -q -p no:cacheprovider tests/python/test_optimizer_footprint.py \
  tests/python/test_estimate.py::test_the_fake_grouped_matmul_has_the_real_ones_output
step first_trace 30 python3 bench/first_step_trace.py --device cuda --rounds 2 --steps 4 \
  --models llama,gpt2,vit --out "$out/first"
step offload 60 python3 bench/offload.py --device cuda --layers 8 --repeats 5 --out "$out/offload"
step compile_offload 60 python3 bench/compile_offload.py --device cuda --out "$out/compile"
step zoo 60 python3 bench/zoo.py --device cuda --hidden 2048 --layers 8 --seq 2048 \
  --dtype bfloat16 --models llama,gpt2 --rounds 5 --out "$out/zoo"
step ops 40 python3 bench/eager_ops.py --device cuda --repeats 5 --budgets 4 --out "$out/ops"
step compile 50 python3 bench/compile_budget.py --device cuda --steps 5 --models "" \
  --inductor-models llama,gpt --out "$out/compile"
step first 30 python3 bench/eager_first_step.py --device cuda --steps 3 --models llama \
  --out "$out/first"
REMAT_SKIP_TESTS="test_torch_compile test_properties test_torch_parity test_source_rules test_distributed test_build_options test_torch_versions test_torch_knapsack_cases test_zoo" \
  timeout 45 bash tests/device/portability.sh "$out/portability.log"
echo "portability rc=$?"
for report in "$out"/step_budget/cuda.md "$out"/fsdp/cuda.md "$out"/estimate/estimate_cuda.md "$out"/first/trace_cuda.md "$out"/offload/README_cuda.md "$out"/compile/offload_cuda.md "$out"/zoo/README_cuda.md; do
  echo "== $report"
  head -40 "$report" 2>/dev/null || echo "(none)"
done
