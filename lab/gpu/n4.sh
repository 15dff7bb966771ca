# next session, call 4 (.device): the sanitizers, two tools at a time, over the regressions, the 50
# drawn ci seeds and lab/sanitize's open finding; `TOOLS="racecheck initcheck"` for the other pair
source lab/gpu/lib.sh
python3 scripts/schedule_seeds.py $R/ci_seeds --n 50 --seed 81504 --backend $MK > $R/seeds.txt 2>&1; tail -1 $R/seeds.txt
for tool in ${TOOLS:-memcheck synccheck}; do
  lane san_$tool python3 -m k3diff.cli sanitize lab/sanitize corpora/regressions $R/ci_seeds --tool $tool --backend $MK --jobs 3 --timeout 300
done
finish
