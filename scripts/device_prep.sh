#!/usr/bin/env bash
# Before scripts/device_check.sh runs on a GPU machine without the network: the pure-Python wheels its image lacks (hydra,
# omegaconf and its parser runtime; it has torch, Lightning, torchmetrics, tensorboard, rich, matplotlib and
# triton) into .whl/, and the converted surnames cache that pretraining reads (names-dataset stays here).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p .whl
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d .whl hydra-core==1.3.8 omegaconf==2.3.1
$PY -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3  # published as a source archive only
[ -f data/surnames/last_names.json ] || $PY -c "from pathlib import Path; from nameorigin.data.surnames import convert; convert(Path('data/surnames'))"
du -sh .whl data/surnames
echo "carry: [.whl, data/surnames]; command: bash scripts/device_check.sh"
