#!/bin/sh
# llmtrain ckpt ls|verify|inspect|export|prune on a checkpoint root made by
# test_export (a small GPT-2 saved by two ranks at steps 3 and 7), then on a
# damaged copy: exit codes and the reasons printed.
# usage: test_cli_ckpt.sh LLMTRAIN TEST_EXPORT
set -u
cli=$1
mk=$2
t=$(mktemp -d "${TMPDIR:-/tmp}/llmt-cli-ckpt-XXXXXX")
trap 'rm -rf "$t"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
expect_rc() { # want cmd...
    want=$1; shift
    "$@" >"$t/out" 2>"$t/err"; rc=$?
    [ "$rc" = "$want" ] && ok "$* -> $rc" || { bad "$* -> $rc (want $want)"; cat "$t/out" "$t/err"; }
}
"$mk" "$t" >/dev/null 2>&1 || { echo "test_export failed"; exit 1; }
r=$t/ckpt

expect_rc 0 "$cli" ckpt ls "$r"
grep -q '^3 .* ok$' "$t/out" && grep -q '^7 .* ok$' "$t/out" || bad "ls lists steps 3 and 7 ok"
expect_rc 0 "$cli" ckpt ls "$r" --json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [x["step"] for x in d]==[3,7] and all(x["ok"] and x["world_size"]==2 for x in d)' "$t/out" \
  && ok "ls --json" || bad "ls --json content"
expect_rc 0 "$cli" ckpt verify "$r"
grep -q 'step 7: ok' "$t/out" || bad "verify prints step 7 ok"
expect_rc 0 "$cli" ckpt inspect "$r" --chunks
grep -q 'param/h.1.mlp.c_fc.weight' "$t/out" && grep -q 'rank 1 ' "$t/out" || bad "inspect shows tensors and chunks"
grep -q 'kv model.heads = 4' "$t/out" || bad "inspect shows key/values"
expect_rc 0 "$cli" ckpt inspect "$r/step-000000000003" --json
python3 -c '
import json,sys
d=json.load(open(sys.argv[1]))
assert d["step"]==3 and d["world_size"]==2 and d["kv"]["model.heads"]=="4"
t={x["name"]:x for x in d["tensors"]}
w=t["param/wte"]; assert w["shape"]==[64,32] and [c["rank"] for c in w["chunks"]]==[0,1]
assert w["chunks"][1]["offsets"]==[32,0] and w["chunks"][1]["bytes"]==32*32*4
' "$t/out" && ok "inspect --json" || bad "inspect --json content"
expect_rc 0 "$cli" ckpt export "$r" --format llmc --out "$t/cli.llmc.bin"
cmp -s "$t/cli.llmc.bin" "$t/model.llmc.bin" && ok "llmc export equals lib/model's" || bad "llmc export differs"
expect_rc 0 "$cli" ckpt export "$r" --step 3 --out "$t/cli.safetensors"
cmp -s "$t/cli.safetensors" "$t/export.safetensors" || {
  # step 3 and step 7 hold the same tensors; only __metadata__ differs
  [ "$(wc -c < "$t/cli.safetensors")" = "$(wc -c < "$t/export.safetensors")" ] && ok "safetensors size" || bad "safetensors export size"; }
expect_rc 1 "$cli" ckpt export "$r" --format llmc --prefix nope/ --out "$t/x.bin"
grep -q "nope/wte" "$t/err" || bad "export names the missing tensor"
[ ! -e "$t/x.bin" ] || bad "failed export left a file"
expect_rc 2 "$cli" ckpt export "$r" --format onnx --out "$t/x.bin"
expect_rc 2 "$cli" ckpt export "$r"
expect_rc 2 "$cli" ckpt frobnicate "$r"
expect_rc 2 "$cli" ckpt ls
expect_rc 2 "$cli" ckpt ls "$r" --step -4
# --step filters into valid JSON; a step that is not there is an error, not an empty table
expect_rc 0 "$cli" ckpt ls "$r" --step 7 --json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [x["step"] for x in d]==[7]' "$t/out" \
  && ok "ls --step 7 --json is one valid entry" || { bad "ls --step 7 --json"; cat "$t/out"; }
expect_rc 1 "$cli" ckpt verify "$r" --step 5
grep -q -- '--step 5' "$t/err" || bad "verify --step 5 names the missing step"
expect_rc 2 "$cli" ckpt inspect "$r/step-000000000003" --step 7
grep -q -- '--step 7' "$t/err" || bad "a step directory with --step names --step"
# an option the subcommand does not read is refused by name, never ignored
for args in "--out ls --out x" "--chunks verify --chunks" "--keep-last inspect --keep-last 2" \
            "--step prune --keep-last 1 --step 3" "--heads export --out $t/y.st --heads 4" \
            "--prefix export --out $t/y.st --prefix p/" \
            "--vocab-size export --out $t/y.st --format safetensors --vocab-size 64"; do
  set -- $args
  flag=$1 sub=$2; shift 2
  expect_rc 2 "$cli" ckpt "$sub" "$r" "$@"
  grep -q -- "$flag" "$t/err" || bad "ckpt $args: the message names $flag"
done
[ ! -e "$t/y.st" ] || bad "a refused export wrote its file"

# damage step 7: one flipped byte in rank 1's data
f=$r/step-000000000007/rank-00001.bin
python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[5000]^=0x10; open(p,"wb").write(b)' "$f"
expect_rc 1 "$cli" ckpt verify "$r"
grep -q 'step 7: BAD checksum' "$t/out" && grep -q 'rank-00001.bin' "$t/out" && grep -q 'step 3: ok' "$t/out" \
  || { bad "verify names the bad chunk"; cat "$t/out"; }
expect_rc 1 "$cli" ckpt verify "$r/step-000000000007"
expect_rc 0 "$cli" ckpt verify "$r" --step 3
# a partial (uncommitted) step is listed as incomplete, not an error for ls
mkdir -p "$r/step-000000000009" && cp "$r/step-000000000003/rank-00000.json" "$r/step-000000000009/"
expect_rc 0 "$cli" ckpt ls "$r"
grep -q '^9 .*incomplete' "$t/out" || bad "ls shows step 9 incomplete"
# truncated file: ls reports BAD with the reason
truncate -s 4096 "$r/step-000000000003/rank-00000.bin"
expect_rc 1 "$cli" ckpt ls "$r"
grep -q '^3 .*BAD.*truncated' "$t/out" || { bad "ls explains the truncation"; cat "$t/out"; }
expect_rc 2 "$cli" ckpt prune "$r"
expect_rc 0 "$cli" ckpt prune "$r" --keep-last 1
# step 3 goes; the partial step 9 is newer than the newest commit (it may be
# a save in flight), so it stays
grep -q 'removed 1 checkpoint directory' "$t/out" || { bad "prune removed step 3"; cat "$t/out"; }
[ -d "$r/step-000000000007" ] && [ ! -d "$r/step-000000000003" ] && [ -d "$r/step-000000000009" ] \
  && ok "prune kept steps 7 and 9" || bad "prune result"
exit $fail
