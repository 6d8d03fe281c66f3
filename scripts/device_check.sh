#!/usr/bin/env bash
# The GPU checks of the fast path (docs/speed.md#the-gpu-fast-path), as one run on a GPU machine that writes
# everything under $OUT. Before it, on a machine with the network: `bash scripts/device_prep.sh` (the wheels the GPU
# machine lacks, into .whl/, and the converted surnames cache in data/surnames/); copy .whl and data/surnames with
# the clone, then run this script there. QUICK=1 runs the same steps tiny, on this machine's CPU, to check the script.
set -uo pipefail
OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1
PY=${PY:-python3}
if [ -d .whl ] && [ "${QUICK:-0}" != 1 ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
if [ "${QUICK:-0}" = 1 ]; then
  DEVICE=cpu; TRAINER="trainer=gpu trainer.accelerator=cpu"; BATCHES="--batches 2 --repeats 1 --cells gru"
  PRETRAIN="data.limit=2000"; DEFAULT="trainer.max_epochs=1 data.split_fractions=[0.8,0.1,0.1]"
else
  DEVICE=cuda; TRAINER="trainer=gpu"; BATCHES="--repeats 3 --cells gru,lstm"; PRETRAIN=""; DEFAULT=""
fi
BUDGET=${BUDGET:-560}  # seconds for the checks, within a 600 s limit per command, less the install and the summary
step() {  # name, seconds, command...: its output to $OUT/<name>.log, its wall time to $OUT/summary.txt
  local name=$1 limit=$2; shift 2
  local start=$SECONDS left=$((BUDGET - SECONDS))
  if [ "$left" -lt 30 ]; then echo "$name: skipped, the budget is spent" | tee -a "$OUT/summary.txt"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
}
{ nvidia-smi -L 2>/dev/null; $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())"
  $PY -c "import triton; print('triton', triton.__version__)" 2>&1 | tail -1; } > "$OUT/summary.txt"
# The Triton loop and the one-length step against the reference on the device itself (TF32 products there).
step parity 90 $PY - "$DEVICE" <<'EOF'
import sys, torch
from nameorigin.config import ModelConfig
from nameorigin.model.charrnn import build_net
device = sys.argv[1]
runs = [(c, i) for c in ("gru", "lstm") for i in (["bptt", "triton"] if device == "cuda" else ["bptt"])]
for cell, impl in runs:
    torch.manual_seed(0)
    nets = [build_net(ModelConfig(cell=cell, impl=i, ngram_buckets=0, dropout=0.0), 60, 18).to(device).train()
            for i in ("autograd", impl)]
    nets[1].load_state_dict(nets[0].state_dict())
    lengths = torch.randint(1, 15, (512,), device=device)
    tokens = torch.randint(2, 60, (512, 14), device=device) * (torch.arange(14, device=device) < lengths[:, None])
    grads = []
    for net in nets:
        net(tokens, lengths).logsumexp(-1).sum().backward()
        grads.append(net.cell.weight_hh.grad)
    print(cell, impl, "max |grad difference| / max |grad|", float((grads[1] - grads[0]).abs().max() / grads[0].abs().max()))
EOF
for fast in on off; do  # the same settings, with and without the fast path
  step "pretrain_$fast" 120 $PY train.py experiment=surnames_pretrain $TRAINER trainer.max_epochs=2 \
    model.fast_path=$fast data.cache=data/surnames callbacks.progress_bar=null paths.log_dir=/tmp/runs/pretrain_$fast $PRETRAIN
done
step bench128 150 $PY -m benchmarks.benchmark --device "$DEVICE" --skip tutorial,accuracy $BATCHES
step bench512 90 $PY -m benchmarks.benchmark --device "$DEVICE" --skip tutorial,accuracy,predict,logging --batch-size 512 $BATCHES
step default_gpu 150 $PY train.py $TRAINER callbacks.progress_bar=null paths.log_dir=/tmp/runs/default $DEFAULT
grep -H -E "test/acc |test/macro_f1|val/acc_best|max_residual|trained in|fast path" "$OUT"/pretrain_*.log "$OUT"/default_gpu.log \
  >> "$OUT/summary.txt" 2>/dev/null
cat "$OUT/summary.txt"
