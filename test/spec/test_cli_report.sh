#!/bin/sh
# llmtrain report on a run larger than the page draws: a run of 70 ranks
# is reported as 70 (the heatmap says it draws the first 64), and events
# past the list's 512 places are counted, never dropped unseen.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }

perf='{"event":"perf","step":1,"wall_s":0.5,"mfu":0.1,"tokens_per_s":100,"compute_s":0.4}'
mkdir run
echo "$perf" > run/metrics.jsonl
i=1
while [ $i -le 600 ]; do
  echo "{\"event\":\"anomaly\",\"step\":$i}" >> run/metrics.jsonl
  i=$((i + 1))
done
r=1
while [ $r -lt 70 ]; do
  mkdir run/rank-$r && echo "$perf" > run/rank-$r/metrics.jsonl
  r=$((r + 1))
done
if "$exe" report run > out.txt 2> err.txt; then ok "report of 70 ranks"; else bad "report: $(cat err.txt)"; fi
grep -q '<td>ranks</td><td colspan="2">70</td>' run/report.html && ok "ranks 70" \
  || bad "ranks: $(grep -o '<td>ranks</td>[^/]*' run/report.html)"
grep -q 'the first 64 of 70 ranks' run/report.html && ok "heatmap says 64 of 70" \
  || bad "the heatmap does not say it draws 64 of 70 ranks"
grep -q 'and 88 more' run/report.html && ok "88 events past the list counted" \
  || bad "events past 512 not counted"
exit $fail
