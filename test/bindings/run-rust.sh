#!/bin/sh
# Rust: cargo test of bindings-template/rust against the built library: the
# smoke test, the generated layout test (vs layout_ref) and a real job.
# usage: run-rust.sh SOURCE_ROOT LIBDIR WORKDIR [LAYOUT_REF_EXE LLMTRAIN_EXE]
src="$1"; libdir="$2"; work="$3"
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: SKIP"; exit 77; }
export LLMT_LIB_DIR="$libdir" CARGO_TARGET_DIR="$work/rust-target"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -n "$4" ]; then
  "$4" > "$work/layout_ref.txt" || exit 1
  export LLMT_LAYOUT_REF="$work/layout_ref.txt" LLMT_LLMTRAIN="$5" LLMT_SOURCE_ROOT="$src"
fi
exec cargo test --offline --quiet --manifest-path "$src/bindings-template/rust/Cargo.toml" -- --nocapture
