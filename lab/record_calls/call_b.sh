#!/bin/bash
# The second device call of a tree's six records, right after call_a.sh (the machine
# still warm): the sanitizers, the launch, ops and embedding benchmarks. About 250 s on
# an H200. Records first, in one tarball (the device tool returns at most 8 files from
# $OUT); a study run after them goes into the same tarball, never beside it.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 scripts/gpu_check.py --tree-hash
mkdir -p /tmp/logs
# The tarball is packed again after every step, with the records of the steps that ran:
# a call cut short (its limit, the session's device time, the machine taken back) still
# returns what it finished, and a later call runs only the rest (STEPS="ops embed").
done_records=()
pack() { tar czf "$OUT/records-b.tgz" "${done_records[@]}" -C /tmp logs; }
step() {  # step NAME LOG RECORDS... -- COMMAND...
    local name=$1 log=$2; shift 2
    local records=(); while [ "$1" != -- ]; do records+=("$1"); shift; done; shift
    case " ${STEPS:-sanitize launch ops embed} " in *" $name "*) ;; *) return ;; esac
    "$@" > "/tmp/logs/$log" 2>&1; echo "$name rc $?"  # ops: 1 where a result was wrong
    done_records+=("${records[@]}"); pack
}
step sanitize sanitize.log docs/sanitizer.json -- python3 scripts/sanitize.py
step launch launch.log docs/perf/launch.json docs/perf/launch.md -- python3 scripts/bench_launch.py
step ops ops.log docs/perf/ops.json docs/perf/ops.md -- python3 scripts/bench_ops.py
step embed embed.log docs/perf/embed.json -- python3 scripts/bench_embed.py
# studies after the records (their output in logs/, in the same tarball); ALLOC_STATE=0
# skips the allocator probe (up to 120 s) where device time is short
if [ "${ALLOC_STATE:-1}" = 1 ]; then
    timeout 120 python3 lab/alloc_state_probe.py --passes 3 --out /tmp/logs/alloc-state.json \
        > /tmp/logs/alloc-state.log 2>&1
    echo alloc-state rc $?
fi
# the small shapes: the planned direct rowpack (narrow chunks) against rect and other block sizes
# (STUDY=0 skips it where device time is short)
for pass in $([ "${STUDY:-1}" = 1 ] && echo 1 2); do
    timeout 90 python3 lab/small_rowpack.py --out-dir /tmp/logs/small-rowpack-$pass --reps 100 \
        > /tmp/logs/small-rowpack-$pass.log 2>&1
    echo small-rowpack pass $pass rc $?
done
[ "${STUDY:-1}" = 1 ] && python3 lab/small_rowpack.py --summarize /tmp/logs/small-rowpack-1 /tmp/logs/small-rowpack-2 \
    -o /tmp/logs/small-rowpack.json | tail -8
# the concat tile's structure without its gather (lab/tile_variants.py's ``identity``
# against the planned kernel on a sweep's concats where a tile runs; IDENTITY=1 runs it,
# about 150 s on an H200)
if [ "${IDENTITY:-0}" = 1 ]; then
    (cd lab && timeout 200 python3 tile_variants.py --sweep 96 --seed 20261301 --ops concat \
        --variants planned,identity -o /tmp/logs/tile-identity.json > /tmp/logs/tile-identity.log 2>&1)
    echo tile-identity rc $?; tail -4 /tmp/logs/tile-identity.log
fi
# tile_variants.py's concat study: study NAME VARIANTS SEED... (logs/NAME-SEED.json, .log)
study() {
    local name=$1 variants=$2; shift 2
    for s in "$@"; do
        (cd lab && timeout "${STUDY_TIMEOUT:-150}" python3 tile_variants.py --sweep 64 --seed "$s" --ops concat \
            --variants "$variants" -o "/tmp/logs/$name-$s.json" > "/tmp/logs/$name-$s.log" 2>&1)
        echo "$name $s rc $?"; grep -E "^[a-z0-9_]+ concat( [a-z0-9]+)?:" "/tmp/logs/$name-$s.log"
    done
}
# the concat tile's size: the planned kernel against 16 KB tiles (u4_r5) on three sweeps'
# concats where a tile runs (TILE_SIZE=1 runs it, about 100 s)
[ "${TILE_SIZE:-0}" = 1 ] && study tile-size planned,u4_r5 20261301 20261303 20261304
# the row gather's windows below a 4-byte granule as three 8-byte loads (rg_v2) against the
# planned five words, on two sweeps' concats where a tile runs (RG_V2=1 runs it, about 70 s)
[ "${RG_V2:-0}" = 1 ] && study rg-v2 planned,rg_v2 20261301 20261303
# the concat tile's structure taken apart (tile_variants.py's ABLATIONS: identity without the
# staged barrier, without the end-of-tile barrier, without the chunk table and its barrier,
# without all three, and id_direct: no shared memory, the row side read and written in place)
# beside planned, identity, identity in 16 KB tiles (id_u4) and the product candidate
# pl_last_no_end_bar (barrier C only where a CTA has another tile) on one sweep's concats
# where a tile runs (ABLATION=1 runs it: the whole call with STEPS=none took 48 s on an
# H100 on 2026-12-07; its timeout is 200 s, and its log keeps each case's line if that cuts
# it short)
[ "${ABLATION:-0}" = 1 ] && STUDY_TIMEOUT=200 study tile-ablation \
    planned,identity,id_no_staged_bar,id_no_end_bar,id_no_table,id_bare,id_direct,id_u4,pl_last_no_end_bar 20261301
# the row gather's staging without the table at every chunk count (pl_free, tree
# b627b501's kernels) against the product, which keeps the table past TABLE_FREE_CHUNKS
# (5), on concats of 6-32 pieces, where the per-chunk cost grows (lab/chunk_cost.py);
# MANY_PIECES=1 runs it (two sweeps of 32 shapes; MP_RUNS="SEED:LO-HI ..." picks others,
# MP_VARIANTS="planned,pl_scan" other variants, MP_OPS="split,concat" both ops; with
# patches/sequenced-gather.patch applied, MP_OPS=split MP_VARIANTS=planned,pl_chunked_gather
# times the split's sequenced gather against its loop a chunk)
if [ "${MANY_PIECES:-0}" = 1 ]; then
    for run in ${MP_RUNS:-20261307:6-32 20261308:6-32}; do
        s=${run%%:*}
        (cd lab && timeout 150 python3 tile_variants.py --sweep 32 --seed "$s" --pieces "${run#*:}" --ops "${MP_OPS:-concat}" \
            --variants "${MP_VARIANTS:-planned,pl_free}" -o "/tmp/logs/many-pieces-$s.json" > "/tmp/logs/many-pieces-$s.log" 2>&1)
        echo "many-pieces $s rc $?"; grep -E "^[a-z0-9_]+ (split|concat)( [a-z0-9]+)?:" "/tmp/logs/many-pieces-$s.log"
    done
    # by granule and piece count: the second variant's speed over the first's (above 1: faster)
    python3 lab/pair_by_pieces.py --variants "${MP_VARIANTS:-planned,pl_free}" /tmp/logs/many-pieces-*.json \
        | tee /tmp/logs/many-pieces-table.txt
fi
pack
for f in sanitize launch embed; do [ -f /tmp/logs/$f.log ] && tail -15 /tmp/logs/$f.log; done
