# next session, call 2 (.gpa, not .device): FLA (KDA) and FlashInfer (MLA) on the ci profile side by
# side (verify cases: widths, acceptances; FlashInfer refuses FP8); small enough to share the card
source lab/gpu/lib.sh
A=/tmp/adapters; mkdir -p $A
for w in .gpa/whl/*.whl .gpa/fi/*.whl; do python3 -m zipfile -e $w $A; done
tar -xJf .gpa/fi/flashinfer-0.7.4-mla.tar.xz -C $A
export PYTHONPATH=$PYTHONPATH:$A
lane fla $P --k3diff-backend fla --k3diff-profile ci -k kda --k3diff-seed 91521 --k3diff-report $R/fla.jsonl --k3diff-save $R/seeds_fla
lane flashinfer $P --k3diff-backend flashinfer --k3diff-profile ci -k mla --k3diff-seed 91522 --k3diff-report $R/flashinfer.jsonl --k3diff-save $R/seeds_fi
finish
