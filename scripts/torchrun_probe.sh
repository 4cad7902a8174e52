#!/usr/bin/env bash
# Whether PYTHON's torchrun runs a job at all: one that starts `true` on one process. Exit 0 if
# it does; else 1, with torchrun's last lines on stderr. Debian 12's torchrun (torch 1.13 on
# Python 3.11) imports but fails in its own agent before any rank starts (AttributeError:
# 'NoneType' object has no attribute 'get'), so importing torch.distributed.run proves nothing.
#   scripts/torchrun_probe.sh PYTHON
python=${1:?usage: torchrun_probe.sh PYTHON}
if ! out=$(timeout 60 "$python" -m torch.distributed.run --nproc_per_node 1 --no_python true 2>&1); then
  echo "$python's torchrun does not run a job of nothing: $(printf '%s\n' "$out" | tail -n 2)" >&2
  exit 1
fi
