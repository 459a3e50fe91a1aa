#!/bin/sh
# The llmtrain command: every subcommand answers --help; version and features
# print what the library says; unknown commands and arguments are usage errors.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }

"$exe" --help > out.txt 2>&1 && ok "--help" || bad "--help exits non-zero"
cmds=$(awk '/^Commands:/{f=1;next} f && /^  [a-z]/{print $1}' out.txt)
[ -n "$cmds" ] || bad "--help lists no commands"
for c in $cmds; do
  if "$exe" "$c" --help > h.txt 2>&1 && grep -q "usage: llmtrain $c" h.txt; then
    ok "$c --help"
  else
    bad "$c --help"
  fi
  "$exe" help "$c" | grep -q "usage: llmtrain $c" && ok "help $c" || bad "help $c"
done

v=$("$exe" version) || bad "version exits non-zero"
echo "$v" | grep -Eq '^llmtrain [0-9]+\.[0-9]+\.[0-9]+ \(header [0-9.]+, ABI 1\.[0-9]+\)$' \
  && ok "version format" || bad "version format: $v"
"$exe" version --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["abi"].startswith("1.")' \
  && ok "version --json" || bad "version --json"
"$exe" features | grep -Eq '^cuda +(yes|no)$' && ok "features" || bad "features"
"$exe" features --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert isinstance(d["features"], list); assert d["cuda_devices"] >= 0' \
  && ok "features --json" || bad "features --json"

"$exe" frobnicate > /dev/null 2>&1; [ $? -eq 2 ] && ok "unknown command -> 2" || bad "unknown command"
"$exe" version --bogus > /dev/null 2>err.txt; [ $? -eq 2 ] && grep -q bogus err.txt \
  && ok "unknown argument -> 2, named" || bad "unknown argument"
"$exe" > /dev/null 2>&1; [ $? -eq 2 ] && ok "no command -> 2" || bad "no command"
exit $fail
