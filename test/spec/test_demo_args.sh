#!/bin/sh
# llmtrain.sh demo trains into runs/demo and reports on it: a user's --out
# reached train beside the demo's own (a usage error since duplicate value
# flags are refused; before that it trained into X and reported runs/demo),
# so demo refuses it before building, naming --out and `llmtrain train`.
# Runs a copy of llmtrain.sh with a stand-in build (an empty build.ninja and
# a llmtrain script that logs its arguments), no apt.
# usage: test_demo_args.sh path/to/llmtrain.sh
script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
command -v bash >/dev/null && command -v ninja >/dev/null || exit 77
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }
cp "$script" llmtrain.sh
mkdir -p b/tools runs/demo && : > b/build.ninja && : > runs/demo/keep
cat > b/tools/llmtrain <<'SH'
#!/bin/sh
echo "$*" >> "$(dirname "$0")/../calls.log"
SH
chmod +x b/tools/llmtrain
export BUILD_DIR=b LLMT_NO_APT=1

bash ./llmtrain.sh demo --out X > o1.log 2>&1; rc=$?
[ $rc = 2 ] && grep -q -- '--out' o1.log && grep -q 'llmtrain train' o1.log &&
  ! grep -q '^train' b/calls.log 2>/dev/null && [ -f runs/demo/keep ] &&
  ok "demo --out X refused, nothing trained or removed" ||
  { bad "demo --out X (rc $rc)"; cat o1.log b/calls.log 2>/dev/null; }
bash ./llmtrain.sh demo --out=X > o2.log 2>&1; rc=$?
[ $rc = 2 ] && ok "demo --out=X refused" || { bad "demo --out=X (rc $rc)"; cat o2.log; }

# the README's two commands still work: a fresh run, and --resume
rm -f b/calls.log; mkdir -p runs/demo; : > runs/demo/keep
bash ./llmtrain.sh demo --resume > o3.log 2>&1; rc=$?
[ $rc = 0 ] && [ -f runs/demo/keep ] &&
  grep -qx 'train examples/specs/demo-cpu.json --out runs/demo --resume' b/calls.log &&
  grep -qx 'report runs/demo' b/calls.log && ok "demo --resume keeps runs/demo" ||
  { bad "demo --resume (rc $rc)"; cat o3.log b/calls.log; }
bash ./llmtrain.sh demo > o4.log 2>&1; rc=$?
[ $rc = 0 ] && [ ! -f runs/demo/keep ] &&
  grep -qx 'train examples/specs/demo-cpu.json --out runs/demo' b/calls.log &&
  ok "demo: a fresh run in runs/demo" || { bad "demo (rc $rc)"; cat o4.log b/calls.log; }
exit $fail
