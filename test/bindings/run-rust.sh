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
m="$src/bindings-template/rust/Cargo.toml"
cargo test --offline --quiet --manifest-path "$m" -- --nocapture || exit 1
# the example (built by cargo test): a job's metrics stream, a JSON line a step
rm -rf "$work/rust-example"
cargo run --offline --quiet --manifest-path "$m" --example job_metrics -- \
  "$src/test/data/corpus" "$work/rust-example" 10 > "$work/rust-example.out" || exit 1
n=$(grep -c '"loss"' "$work/rust-example.out")
[ "$n" = 10 ] || { echo "example: $n metric lines, expected 10"; exit 1; }
grep -q '"saved_step": 10' "$work/rust-example.out" || { echo "example: no save at 10"; exit 1; }
echo "example job_metrics: 10 steps printed, saved at 5 and 10"
