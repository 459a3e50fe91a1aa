# Shared by the shell tests of llmt_job on the CUDA engine, sourced after
# ../run_lib.sh (which defines ok and bad).
# losses METRICS: "step loss" per line, one per step (the newest
# generation's line where a restart ran a step again)
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.e]*\).*/\1 \2/p' "$1" | sort -n -k1,1 -u; }
# close A B WHAT [N]: the same steps (N of them where given), each loss
# within 2e-2 relative (bf16 parameters and GEMMs, another reduction order)
close() {
  if [ -s "$1" ] && [ "$(wc -l < "$1")" = "$(wc -l < "$2")" ] &&
     { [ -z "${4:-}" ] || [ "$(wc -l < "$1")" = "$4" ]; } &&
     paste "$1" "$2" | awk '{d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > m) m = r;
                             if ($1 != $3 || r > 2e-2) bad = 1}
                            END {printf "max relative loss diff %.3g\n", m; exit bad}'; then
    ok "$3"
  else
    bad "$3"; paste "$1" "$2"
  fi
}
