#!/bin/sh
# Install libportals, portals.h and portals.pc under PREFIX (default
# /usr/local), from a release build:
#   cargo build --release -p portals-capi && portals-capi/install.sh [PREFIX]
set -eu
prefix=${1:-/usr/local}
here=$(cd "$(dirname "$0")" && pwd)
# PROFILE=debug installs a debug build.
target=${CARGO_TARGET_DIR:-$here/../target}/${PROFILE:-release}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../Cargo.toml" | head -n 1)
for f in libportals.so libportals.a; do
    [ -f "$target/$f" ] || { echo "install.sh: $target/$f missing: run cargo build --release -p portals-capi" >&2; exit 1; }
done
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/libportals.so" "$prefix/lib/"
install -m 0644 "$target/libportals.a" "$prefix/lib/"
install -m 0644 "$here/include/portals.h" "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$here/portals.pc.in" > "$prefix/lib/pkgconfig/portals.pc"
echo "installed under $prefix; build with: cc prog.c \$(pkg-config --cflags --libs portals)"
