#!/bin/sh
# Rust smoke test: cargo test of bindings-template/rust against the built library.
# usage: run-rust.sh SOURCE_ROOT LIBDIR WORKDIR
src="$1"; libdir="$2"; work="$3"
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: SKIP"; exit 77; }
export LLMT_LIB_DIR="$libdir" CARGO_TARGET_DIR="$work/rust-target"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec cargo test --offline --quiet --manifest-path "$src/bindings-template/rust/Cargo.toml"
