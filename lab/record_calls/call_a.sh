#!/bin/bash
# The first of the two device calls that make a tree's six records (run from the repo
# root through the device tool, e.g. `bash lab/record_calls/call_a.sh 20261215`): the
# GPU check and the benchmark with its random sweep. About 440 s on an H200.
# The device tool returns at most 8 files from $OUT: everything goes into one tarball.
set -u
seed=${1:?the sweep seed}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 scripts/gpu_check.py --tree-hash
timeout 150 python3 -m pytest -q -x tests/test_gpu_fastlaunch.py tests/test_gpu_alloc.py tests/test_gpu_ops.py 2>&1 | tail -4
if [ "${PIPESTATUS[0]}" != "0" ]; then echo PRECHECK FAILED; exit 3; fi
mkdir -p /tmp/logs
python3 scripts/bench.py --sweep 64 --seed "$seed" > /tmp/logs/bench.log 2>&1; echo bench rc $?
python3 scripts/gpu_check.py > /tmp/logs/gpucheck.log 2>&1; echo check rc $?
tar czf "$OUT/records-a.tgz" docs/gpu-check.json docs/perf/results.json docs/perf/README.md docs/perf/bandwidth.png -C /tmp logs
tail -30 /tmp/logs/bench.log; tail -8 /tmp/logs/gpucheck.log
