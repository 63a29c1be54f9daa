#!/bin/bash
# A patch's kernels against main's on sweep concats where a tile runs, in one device call:
# main's tree and a copy with PATCH applied, each timing tile_variants.py's `planned` (the
# kernel its planner plans), alternating tree by tree for each seed, every result checked.
#   PATCH=lab/patches/row-gather-with-table.patch SEEDS="20261301 20261303" bash lab/record_calls/ab_patch.sh
# ($OUT/ab.tgz holds ab-out/ab-{main,patched}-SEED.{json,log}); SWEEP_N shapes a sweep (64),
# TV_ARGS more arguments to tile_variants.py (TV_ARGS="--pieces 7-32": many-piece shapes)
set -u
# The device tool returns at most 8 files from $OUT: everything goes into one tarball.
final=$OUT; OUT=/tmp/ab-out; rm -rf "$OUT"; mkdir -p "$OUT"
trap 'tar czf "$final/ab.tgz" -C /tmp ab-out' EXIT
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf /tmp/patched && mkdir -p /tmp/patched && cp -r . /tmp/patched/ && (cd /tmp/patched && git apply "$PATCH") || exit 1
for s in ${SEEDS:-20261301 20261303}; do
    for tree in main patched; do
        root=$([ $tree = main ] && pwd || echo /tmp/patched)
        (cd "$root/lab" && timeout 100 python3 tile_variants.py --sweep "${SWEEP_N:-64}" --seed "$s" --ops concat \
            --variants planned ${TV_ARGS:-} -o "$OUT/ab-$tree-$s.json" > "$OUT/ab-$tree-$s.log" 2>&1)
        echo "$tree $s rc $?"; grep -E "^planned concat( [a-z0-9]+)?:" "$OUT/ab-$tree-$s.log"
    done
done
