# The preamble of the shell tests that run jobs, sourced by a script after
# its own skip checks:  . "$(dirname "$0")/../run_lib.sh"
# The script then runs from a temporary directory, removed at exit, that
# holds corpus/ (the frozen test/data/corpus/*.md of LLMT_SOURCE_ROOT: a
# doc edit cannot move a test's numbers); ok and bad print a result (bad
# sets fail, the script's exit status at its end).
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }
mkdir corpus && cp "${LLMT_SOURCE_ROOT:?}"/test/data/corpus/*.md corpus/ || exit 1
# step_losses METRICS: "step loss" lines of a metrics.jsonl, the newest
# loss of each step (a restart's, where one ran a step again), 6 decimals
step_losses() {
  python3 -c '
import json, sys
d = {}
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "loss" in j:
        d[j["step"]] = j["loss"]
for s in sorted(d):
    print(s, "%.6f" % d[s])' "$1"
}
