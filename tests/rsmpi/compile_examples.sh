#!/usr/bin/env bash
# Which rsmpi programs build unchanged against mpi-rsmpi (only the
# dependency line changed), and which of those run correctly (exit status
# 0: rsmpi's examples check their results with assert!) under ptlrun on 2
# and 4 ranks.
#
#   tests/rsmpi/compile_examples.sh DIR [NAME...]
#
# DIR holds the programs (*.rs), e.g. rsmpi's examples/ directory:
#   git -C RSMPI_CLONE archive HEAD examples | tar -x -C /tmp/rsmpi
#   tests/rsmpi/compile_examples.sh /tmp/rsmpi/examples
# NAMEs restrict the run to those programs. Needs no network: the scratch
# project reuses this workspace's Cargo.lock (--offline).
# Environment: PTLRUN (default target/release/ptlrun), WORK (the scratch
# project, default target/rsmpi-examples), RUN_TIMEOUT (seconds per job,
# default 60), PROFILE (cargo profile of the programs, default dev),
# PACKAGE (the crate `mpi` names: mpi-rsmpi, or mpi-on-portals for the
# count before the rsmpi face existed).
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:?usage: compile_examples.sh DIR [NAME...]}
shift
src=$(cd "$src" && pwd)
work=${WORK:-$repo/target/rsmpi-examples}
ptlrun=${PTLRUN:-$repo/target/release/ptlrun}
limit=${RUN_TIMEOUT:-60}
profile=${PROFILE:-dev}
package=${PACKAGE:-mpi-rsmpi}
outdir=debug
# rsmpi's complex numbers are behind its `complex` feature.
features=
[ "$package" = mpi-rsmpi ] && features=', features = ["complex"]'
[ "$profile" = release ] && outdir=release

if [ ! -x "$ptlrun" ]; then
    echo "no launcher at $ptlrun: cargo build --release -p portals-runtime --bin ptlrun" >&2
    exit 2
fi

mkdir -p "$work/src" "$work/examples" "$work/logs"
cat > "$work/Cargo.toml" <<TOML
[package]
name = "rsmpi-examples"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
mpi = { package = "$package", path = "$repo/$package"$features }
# What rsmpi's examples use beside mpi (rsmpi's dev-dependencies).
memoffset = "0.9"
num-complex = { version = "0.4.6", default-features = false }

# rsmpi's own features and cfgs, so that programs that test them build
# without unexpected-cfg warnings (derive and complex are always on in
# mpi-rsmpi; there are no libffi operations).
[features]
user-operations = []
derive = []
complex = []

[lints.rust]
unexpected_cfgs = { level = "warn", check-cfg = ["cfg(msmpi)"] }

[workspace]
TOML
: > "$work/src/lib.rs"
cp "$repo/Cargo.lock" "$work/Cargo.lock"
rm -f "$work/examples/"*.rs "$work/logs/"*
if [ $# -gt 0 ]; then
    for n in "$@"; do cp "$src/$n.rs" "$work/examples/"; done
else
    cp "$src/"*.rs "$work/examples/"
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$work/target}

built=0 ran2=0 ran4=0 total=0
printf '%-32s %-8s %-6s %-6s %s\n' program build np=2 np=4 "first error"
for f in "$work/examples/"*.rs; do
    n=$(basename "$f" .rs)
    total=$((total + 1))
    log="$work/logs/$n"
    if cargo build --offline --quiet --profile "$profile" --example "$n" \
        --manifest-path "$work/Cargo.toml" >"$log.build" 2>&1; then
        built=$((built + 1))
        r=()
        for np in 2 4; do
            if timeout $((limit + 10)) "$ptlrun" -n "$np" --timeout "$limit" \
                "$CARGO_TARGET_DIR/$outdir/examples/$n" >"$log.run$np" 2>&1; then
                r+=(ok)
                [ "$np" = 2 ] && ran2=$((ran2 + 1))
                [ "$np" = 4 ] && ran4=$((ran4 + 1))
            else
                r+=("fail:$?")
            fi
        done
        printf '%-32s %-8s %-6s %-6s\n' "$n" yes "${r[0]}" "${r[1]}"
    else
        why=$(grep -m1 -E '^error' "$log.build" | cut -c1-110)
        printf '%-32s %-8s %-6s %-6s %s\n' "$n" no - - "$why"
    fi
done
echo "built $built/$total; ran correctly on 2 ranks: $ran2, on 4 ranks: $ran4 (logs in $work/logs)"
