#!/usr/bin/env bash
# call 83 (twentieth session), on 2b01331's kernels after call 82: the MoE's one launch against the
# faster fork-join (issue 32: tune_persistent, both measured in one run), then the false-alarm
# controls on the GPU (last complete in call 11; call 77's lane timed out behind the mutants): one
# planted bug to start the run, every control after it.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-420}
TAIL=10 cmd A_persistent 100 python3 -m megakernel.tools.tune_persistent --formats mxfp4 \
  --batches 1,8,64 --settings default,lean1/SM
TAIL=40 cmd B_controls $(left) python3 -m k3diff.cli mutants --device cuda --only no_renormalise --controls all
finish
