#!/bin/sh
# The llmtrain command: every subcommand answers --help; version and features
# print what the library says; unknown commands and arguments are usage errors.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
# the interpreter meson found ($LLMT_PYTHON): a launcher on PATH (a pyenv
# shim) costs ~0.5 s of CPU a call
py3=${LLMT_PYTHON:-python3}
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
  # kept as help-$c.txt for the flag check below
  if "$exe" "$c" --help > "help-$c.txt" 2>&1 && grep -q "usage: llmtrain $c" "help-$c.txt"; then
    ok "$c --help"
  else
    bad "$c --help"
  fi
  "$exe" help "$c" | grep -q "usage: llmtrain $c" && ok "help $c" || bad "help $c"
done

v=$("$exe" version) || bad "version exits non-zero"
echo "$v" | grep -Eq '^llmtrain [0-9]+\.[0-9]+\.[0-9]+ \(header [0-9.]+, ABI 1\.[0-9]+\)$' \
  && ok "version format" || bad "version format: $v"
"$exe" version --json | "$py3" -c 'import json,sys; d=json.load(sys.stdin); assert d["abi"].startswith("1.")' \
  && ok "version --json" || bad "version --json"
"$exe" features | grep -Eq '^cuda +(yes|no)$' && ok "features" || bad "features"
"$exe" features --json | "$py3" -c 'import json,sys; d=json.load(sys.stdin); assert isinstance(d["features"], list); assert d["cuda_devices"] >= 0' \
  && ok "features --json" || bad "features --json"

"$exe" frobnicate > /dev/null 2>&1; [ $? -eq 2 ] && ok "unknown command -> 2" || bad "unknown command"
"$exe" version --bogus > /dev/null 2>err.txt; [ $? -eq 2 ] && grep -q bogus err.txt \
  && ok "unknown argument -> 2, named" || bad "unknown argument"
"$exe" > /dev/null 2>&1; [ $? -eq 2 ] && ok "no command -> 2" || bad "no command"

# --help lists every flag a command's source parses (no hidden flag).
# unlisted HELP FLAG...: the flags not in HELP followed by a word boundary
# (what `grep -q -- "$flag\b"` looks for), one awk for all of a command's
# flags instead of a grep each (~100 processes). A byte past ASCII counts
# as a word character (grep's \b may see a letter there), so this lists a
# superset of grep's misses; the caller confirms each one with grep.
unlisted() {
  help=$1; shift
  awk -v flags="$*" '
    function word(ch) { return ch ~ /^[A-Za-z0-9_]$/ || (ch != "" && ch !~ /^[\001-\177]$/) }
    BEGIN { n = split(flags, fl, " "); for (i = 1; i <= n; i++) len[i] = length(fl[i]) }
    { for (i = 1; i <= n; i++) {
        if (i in found) continue
        at = 0
        while ((p = index(substr($0, at + 1), fl[i])) > 0) {
          at += p
          last = substr(fl[i], len[i], 1); next_ch = substr($0, at + len[i], 1)
          if (word(last) != word(next_ch)) { found[i] = 1; break }
        }
      } }
    END { for (i = 1; i <= n; i++) if (!(i in found)) print fl[i] }' "$help"
}
src=${LLMT_SOURCE_ROOT:-}/tools
if [ -d "$src" ]; then
  for f in "$src"/cmd_*.c; do
    c=$(basename "$f" .c); c=${c#cmd_}
    [ "$c" = version ] && cs="version features" || cs=$c
    flags=$(grep -o '"-\{1,2\}[a-z][a-z0-9-]*"' "$f" | tr -d '"' | sort -u)
    for cmd in $cs; do
      [ -f "help-$cmd.txt" ] || "$exe" "$cmd" --help > "help-$cmd.txt" 2>&1
      # shellcheck disable=SC2086
      for flag in $(unlisted "help-$cmd.txt" $flags); do
        grep -q -- "$flag\b" "help-$cmd.txt" ||
          bad "$cmd --help does not list $flag (parsed in $(basename "$f"))"
      done
    done
  done
  ok "every parsed flag is in its command's --help"
else
  bad "LLMT_SOURCE_ROOT not set: cannot read tools/"
fi

# usage errors: exit 2 and the message names the flag or argument at fault
usage_err() { # what-to-find cmd...
  want=$1; shift
  "$exe" "$@" > /dev/null 2> err.txt; rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$want" err.txt; then ok "$* -> 2 naming $want"
  else bad "$* -> $rc, want 2 naming $want: $(head -c 300 err.txt)"; fi
}
printf '{"name": "t", "model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 300, "seq_len": 32}}\n' > s.json
mkdir -p rd && : > rd/metrics.jsonl
usage_err --bogus train s.json --bogus
usage_err "'--out'" train s.json --out
usage_err extra.json train s.json extra.json
usage_err "'--steps'" train s.json --steps
usage_err --steps train s.json --steps abc
usage_err --steps train s.json --steps -1
usage_err --steps train s.json --steps 1e99
usage_err --trace report rd --trace 5-8
usage_err rd2 report rd rd2
usage_err "'--out'" report rd --out
usage_err --bogus launch s.json --bogus
usage_err "'--nproc'" launch --nproc
usage_err extra.json launch s.json extra.json
usage_err --steps launch s.json --steps abc
usage_err --threads launch s.json --threads 0
usage_err --trace launch s.json --trace 1-2
usage_err --prom launch s.json --prom p.prom
usage_err --hours plan s.json --hours 5
usage_err --interval plan s.json --interval 60
usage_err --trials plan s.json --trials 4
usage_err --seed plan s.json --seed 3
usage_err --seed plan s.json --seed 0 --simulate
usage_err --keys plan s.json --keys
usage_err --keys plan --keys --world 4
usage_err --hours plan s.json --explain --hours 3
usage_err extra comm env extra
# --prom into a directory that does not exist: refused before training
"$exe" train s.json --out run --prom nowhere/x.prom > /dev/null 2> err.txt; rc=$?
[ $rc -eq 1 ] && grep -q 'nowhere/x.prom' err.txt && ok "--prom in a missing directory refused" \
  || bad "--prom nowhere/x.prom -> $rc: $(head -c 300 err.txt)"
[ ! -d run ] && ok "... before the run directory is made" || bad "--prom refused after making run/"
# a spec that does not parse: the key named, and the file once per line
# (the library's message starts with the path; the command adds none)
printf '{"model": {"arch": "gpt3"}}' > bad-spec.json
for c in plan train launch; do
  args="bad-spec.json"
  [ $c = plan ] || args="bad-spec.json --out run-$c"
  [ $c = launch ] && args="--nproc 2 $args"
  # shellcheck disable=SC2086
  "$exe" $c $args > bs.txt 2>&1 && bad "$c accepted a bad spec" ||
    { grep -q "model.arch" bs.txt && ! grep -q "bad-spec.json: bad-spec.json" bs.txt &&
        [ "$(grep -c "bad-spec.json" bs.txt)" = 1 ] && ok "$c names the bad key, the file once" ||
        { bad "$c's message for a bad spec"; cat bs.txt; }; }
done
exit $fail
