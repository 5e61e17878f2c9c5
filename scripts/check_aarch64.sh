#!/usr/bin/env bash
# The aarch64 (NEON) build, checked on an x86-64 machine under qemu user-mode emulation:
#   scripts/check_aarch64.sh rust    cargo test of turbdb-core built for aarch64 (the NEON
#                                    kernel against the portable one, and everything else)
#   scripts/check_aarch64.sh wheel   the abi3 aarch64 wheel, installed with its aarch64
#                                    dependencies, runs tests/wheel_smoke.py in Debian's
#                                    arm64 Python 3.11
# Needs: rustup target aarch64-unknown-linux-gnu, gcc-aarch64-linux-gnu, qemu-user; for
# `wheel` also Debian's arm64 package lists (dpkg --add-architecture arm64 && apt-get update)
# and PyPI. Work files go to build/aarch64/ (ignored). Slow: a cold cross build takes
# about 10 minutes on 2 cores, so `make test` does not run this; `make check-aarch64` does.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$REPO/build/aarch64
TARGET=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc

need() {  # need COMMAND WHAT-TO-DO
    command -v "$1" >/dev/null || { echo "check_aarch64: $1 not found: $2" >&2; exit 2; }
}
need aarch64-linux-gnu-gcc "install Debian's gcc-aarch64-linux-gnu"
need qemu-aarch64 "install Debian's qemu-user"
rustup target list --installed 2>/dev/null | grep -qx $TARGET \
    || { echo "check_aarch64: rustup target $TARGET missing: rustup target add $TARGET" >&2; exit 2; }

rust() {
    # The sysroot of the cross gcc holds aarch64's glibc, which the test binaries load.
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
    cd "$REPO" && cargo test --release -p turbdb-core --target $TARGET
}

# Debian's arm64 Python 3.11 and the libraries it loads, unpacked (not installed) into a root
# that qemu uses for aarch64's dynamic loader and libraries.
PYTHON_DEBS="python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libexpat1
zlib1g libssl3 libffi8 libbz2-1.0 liblzma5 libsqlite3-0 libncursesw6 libtinfo6 libreadline8
libuuid1 libgcc-s1 libstdc++6 libcrypt1 libdb5.3 libgdbm6 libnsl2 libtirpc3 libgssapi-krb5-2
libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1"

python_root() {
    local root=$WORK/root
    [ -x "$root/usr/bin/python3.11" ] && return
    dpkg --print-foreign-architectures | grep -qx arm64 \
        || { echo "check_aarch64: no arm64 package lists: dpkg --add-architecture arm64 && apt-get update" >&2; exit 2; }
    mkdir -p "$WORK/debs" "$root"
    (cd "$WORK/debs" && for p in $PYTHON_DEBS; do apt-get download -q "$p:arm64"; done)
    for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$root"; done
}

wheel() {
    cd "$REPO"
    rm -rf "$WORK/wheels" "$WORK/site" "$WORK/smoke"
    maturin=$(command -v maturin || echo "$REPO/.venv/bin/maturin")
    "$maturin" build --release --target $TARGET --out "$WORK/wheels"
    local whl
    whl=$(ls "$WORK"/wheels/turbdb-*-cp311-abi3-manylinux_*_aarch64.whl)
    python_root
    # The wheel and its dependencies as pip would install them on an aarch64 machine.
    python3 -m pip install --quiet --target "$WORK/site" --only-binary=:all: \
        --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
        --platform manylinux_2_34_aarch64 --platform manylinux_2_28_aarch64 \
        --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --platform any "$whl"
    mkdir -p "$WORK/smoke"
    cd "$WORK/smoke"
    # A user's shell: no Rust on PATH, nothing of this repository on the path but the wheel.
    env -i PATH=/usr/bin:/bin HOME="$WORK/smoke" LANG=C.UTF-8 PYTHONPATH="$WORK/site" \
        qemu-aarch64 -L "$WORK/root" "$WORK/root/usr/bin/python3.11" "$REPO/tests/wheel_smoke.py" \
        | tee "$WORK/smoke/out.txt"
    grep -qx "machine aarch64" "$WORK/smoke/out.txt"
    grep -qx "kernel neon" "$WORK/smoke/out.txt"
    echo "check_aarch64: $(basename "$whl") imports, queries and runs the neon kernel under qemu"
}

case "${1:-all}" in
    rust) rust ;;
    wheel) wheel ;;
    all) rust && wheel ;;
    *) echo "usage: $0 [rust|wheel|all]" >&2; exit 2 ;;
esac
