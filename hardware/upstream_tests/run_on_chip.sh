# How the files of tpu_v5_lite.json after the first four were run on the TPU v5e (2026-12-06):
# copied with hardware/probes/matmul_probe.py into .upstream/chipjob/ (ignored) of the checkout that
# the device tool sends, with .upstream/jax-0.10.2 (the tag's jax/ and tests/pallas/), and run there as
#   bash .upstream/chipjob/run.sh probe "190 tpu_pallas_pipeline_test.py" "90 tpu_gmm_test.py ..." ...
# .upstream/chipjob/exclude: the tests earlier calls had started (deselected). Then, here:
#   python hardware/merge_chip_logs.py hardware/upstream_tests/tpu_v5_lite.json CALL*/chip.jsonl
# Usage: bash .upstream/chipjob/run.sh [probe] "TIMEOUT FILE [FILE...]" ...
# Each quoted group: one pytest process on the chip, killed after TIMEOUT s.
set -u
export PYTHONUNBUFFERED=1
R=$PWD; J=$R/.upstream/jax-0.10.2
date -u +%FT%TZ > $OUT/started
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: --no-deps --index-url file:///opt/pypi/simple --target /tmp/site absl-py >> $OUT/pytest.log 2>&1
mkdir -p /tmp/plug && cp $R/jax_fork/coverage_plugin.py /tmp/plug/jax_fork_coverage_plugin.py
BASE=${PYTHONPATH:-}
if [ "${1:-}" = probe ]; then
  shift
  ( cd $R && PYTHONPATH=$BASE:/tmp/site timeout -k 5 100 python3 .upstream/chipjob/matmul_probe.py chip --out $OUT > $OUT/probe.log 2>&1; echo "probe rc $?" >> $OUT/probe.log )
fi
for group in "$@"; do
  set -- $group; t=$1; shift
  files=""; for f in "$@"; do files="$files tests/pallas/$f"; done
  s=$(date +%s)
  ( cd $J && PYTHONPATH=$J:/tmp/plug:$BASE:/tmp/site JAX_FORK_COVERAGE_TPU=chip JAX_FORK_COVERAGE_TIMEOUT=60 \
    JAX_FORK_COVERAGE_LOG=$OUT/chip.jsonl JAX_FORK_COVERAGE_EXCLUDE=$R/.upstream/chipjob/exclude PYTHONDONTWRITEBYTECODE=1 \
    timeout -k 10 -s INT $t python3 -m pytest -p jax_fork_coverage_plugin -p no:cacheprovider --rootdir=$J -q $files >> $OUT/pytest.log 2>&1 )
  rc=$?
  echo "{\"files\": \"$*\", \"rc\": $rc, \"seconds\": $(( $(date +%s) - s )), \"limit\": $t}" >> $OUT/groups.jsonl
  echo "group $* rc $rc $(( $(date +%s) - s )) s"
done
( cd $J && PYTHONPATH=$J:$BASE python3 -c "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)" > $OUT/jaxinfo 2>&1 )
