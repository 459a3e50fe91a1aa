#!/bin/sh
# Node-local checkpoint roots (issue 19): two `llmtrain launch` agents on
# this host as two nodes (--nnodes 2, 2 ranks each), each with its own run
# directory, so checkpoint.dir ("ckpt" under it) is a different directory
# on each node, as a node's own disk is. With a durable tier every rank
# shares, the job takes the roots as node-local (lib/job/ckpt_shared.c):
# each rank's part is written to its node's root and copied to the durable
# tier, where the steps commit (lib/ckpt/save.c). Checked:
#   - uninterrupted: every save commits in the durable tier (manifest and
#     all 4 parts there), each node's root holds only its own ranks' parts
#     and no manifest, the job reports the node-local root; the losses
#     equal one agent's run on one shared root (4 ranks);
#   - rank 3 (node 1) killed at step 7, node 0's spare takes it: the gang
#     restarts from step 6, its parts read from the nodes' own roots (the
#     moved rank's from the durable tier) and exchanged, and every loss
#     still equals; without a spare the world shrinks to 2 ranks (dp 2,
#     the same global batch), which read the durable tier (losses within
#     1e-5: another sum order);
#   - the same in place (--in-place, a host tier): the survivors restore
#     from memory, the promoted spare's part read from the durable tier;
#   - a peer tier beside them: rank 2 loses its disk and dies; node 1's
#     spare takes it and gets its part back from the replica on node 0
#     (restore tier node-local, peer_restored), losses equal;
#   - refused by name: node-local roots without a durable tier
#     (checkpoint.dir); the agents stop at once (every rank of both nodes
#     failed with the job's error: node 1 counts its ranks' errors although
#     node 0 reported first).
# usage: test_launch_nodelocal.sh path/to/llmtrain (exit 77 without gloo)
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
"$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
. "$(dirname "$0")/../run_lib.sh"
mk() { # file tiers
  cat > "$1" <<JSON
{"name": "nodelocal",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16},
 "batch": {"micro": 1, "global": 8},
 "optimizer": {"lr": 1e-2},
 "train": {"steps": 10, "seed": 3, "eval_interval": 0, "log_interval": 1, "threads": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 2, "async": false, "tiers": [$2]},
 "fault_tolerance": {"collective_timeout_s": 6},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl"}}
JSON
}
durable="{\"kind\": \"durable\", \"path\": \"$tmp/durable\"}"
mk nl.json "{\"kind\": \"local\"}, $durable"
mk ip.json "{\"kind\": \"host\"}, {\"kind\": \"local\"}, $durable"
mk bare.json '{"kind": "local"}'
mk peer.json "{\"kind\": \"local\"}, {\"kind\": \"peer\", \"path\": \"peer\"}, $durable"
# the newest loss of each step in a metrics file (run_lib.sh)
losses() { step_losses "$1"; }
# two NAME SPEC [FAULT] [launch args]: node 0 (a spare slot) and node 1, each
# agent with its own run directory NAME-0 and NAME-1; 0 when both finished
two() {
  n=$1 spec=$2 f=$3
  shift 3
  mkdir "rdzv-$n"
  LLMT_FAULT=$f "$exe" launch --out "$n-0" --nproc 2 --spares 1 --nnodes 2 --node-rank 0 \
    --rdzv "rdzv-$n" "$@" "$spec" > "$n-0.log" 2>&1 &
  p0=$!
  LLMT_FAULT=$f "$exe" launch --out "$n-1" --nproc 2 --nnodes 2 --node-rank 1 \
    --rdzv "rdzv-$n" "$@" "$spec" > "$n-1.log" 2>&1 &
  p1=$!
  r0=0 r1=0
  wait $p0 || r0=$?
  wait $p1 || r1=$?
  [ $r0 -eq 0 ] && [ $r1 -eq 0 ]
}
# the reference: one agent, one shared root, 4 ranks
mk ref.json '{"kind": "local"}'
"$exe" launch --out ref --nproc 4 ref.json > ref.log 2>&1 || { bad "reference run"; cat ref.log; exit 1; }
losses ref/metrics.jsonl > ref.loss
[ "$(wc -l < ref.loss)" -eq 10 ] && ok "reference: 10 steps on one shared root" || bad "reference"

two nl nl.json "" && ok "node-local roots, durable tier: both agents finished" ||
  { bad "agents exited $r0 and $r1"; tail -8 nl-0.log nl-1.log; }
grep -q '"event":"ckpt_root","node_local":true' nl-0/metrics.jsonl &&
  grep -q "^checkpoints: .*(this node's parts; committed in $tmp/durable)" nl-0.log &&
  ok "the job reports its roots as node-local (metrics, llmtrain train's closing lines)" ||
  { bad "no ckpt_root event or closing line"; grep checkpoints: nl-0.log; }
[ "$(ls -d "$tmp"/durable/step-*/manifest.json 2>/dev/null | wc -l)" -ge 3 ] &&
  [ -f "$tmp/durable/step-000000000010/rank-00003.json" ] && grep -q step-000000000010 "$tmp/durable/latest" &&
  ok "every save committed in the durable tier ($(ls "$tmp/durable" | grep -c step-) steps, latest 10)" ||
  { bad "durable tier"; ls -R "$tmp/durable" | head -20; }
parts() { ls "$1"/ckpt/step-000000000010/ 2>/dev/null | tr '\n' ' '; }
[ "$(parts nl-0)" = "rank-00000.bin rank-00000.json rank-00001.bin rank-00001.json " ] &&
  [ "$(parts nl-1)" = "rank-00002.bin rank-00002.json rank-00003.bin rank-00003.json " ] &&
  ! ls nl-0/ckpt/step-*/manifest.json nl-1/ckpt/step-*/manifest.json > /dev/null 2>&1 &&
  ok "each node's root holds its own ranks' parts and no manifest" ||
  bad "node roots: node 0 '$(parts nl-0)', node 1 '$(parts nl-1)'"
[ "$(ls nl-0/ckpt | grep -c step-)" -le 3 ] && ok "the node roots keep keep_last (3) steps" ||
  bad "node 0 root: $(ls nl-0/ckpt)"
losses nl-0/metrics.jsonl > nl.loss
cmp -s ref.loss nl.loss && ok "losses equal the shared root's" || { bad "losses"; diff ref.loss nl.loss; }

# a bit flipped on node 1's disk in rank 2's part of step 10: the resume
# finds it by its checksums while reading the node-local roots and takes
# step 10 from the durable tier instead (before: a hard error)
python3 - nl-1/ckpt/step-000000000010/rank-00002.bin <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4096 + 64)
    b = bytearray(f.read(16))
    f.seek(4096 + 64)
    f.write(bytes(x ^ 0x5A for x in b))
PY
rm -rf rdzv-nl
two nl nl.json "" --resume && ok "node-local part corrupt: the resume finished" ||
  { bad "resume over a corrupt node-local part: agents exited $r0 and $r1"; tail -8 nl-0.log nl-1.log; }
grep -q '"event":"restore","tier":"durable","step":10' nl-0/metrics.jsonl &&
  grep -rqs "node-local roots: step 10 is corrupt" nl-0.log nl-1.log nl-0/agent nl-1/agent &&
  ok "step 10 read from the durable tier, the corrupt node-local part named" ||
  { bad "restore after a corrupt node-local part: $(grep -o '"event":"restore[^}]*' nl-0/metrics.jsonl)";
    grep -rhs "corrupt" nl-0.log nl-1.log nl-0/agent nl-1/agent | head -3; }

rm -rf "$tmp/durable"
two kill nl.json kill:3:7 && ok "rank 3 killed at step 7: both agents finished" ||
  { bad "agents exited $r0 and $r1"; tail -8 kill-0.log kill-1.log; }
grep -q "spare slot 2 promoted to rank 3" kill-0.log && ok "node 0's spare took rank 3" ||
  bad "no promotion: $(grep launch: kill-0.log)"
grep -q '"event":"restore","tier":"node-local","step":6' kill-0/metrics.jsonl &&
  ok "the gang restarted from step 6 (committed in the durable tier) read from the nodes' roots" ||
  bad "restore: $(grep -o '"event":"restore[^}]*' kill-0/metrics.jsonl)"
losses kill-0/metrics.jsonl > kill.loss
cmp -s ref.loss kill.loss && ok "losses after the restart equal the uninterrupted run's" ||
  { bad "losses"; diff ref.loss kill.loss; }

# no spare: the world shrinks to 2 ranks (dp 2, the same global batch), a
# world that did not save the checkpoint: the durable tier is read
rm -rf "$tmp/durable"
mkdir rdzv-shrink
LLMT_FAULT=kill:3:7 "$exe" launch --out shrink-0 --nproc 2 --nnodes 2 --node-rank 0 \
  --rdzv rdzv-shrink nl.json > shrink-0.log 2>&1 &
p0=$!
LLMT_FAULT=kill:3:7 "$exe" launch --out shrink-1 --nproc 2 --nnodes 2 --node-rank 1 \
  --rdzv rdzv-shrink nl.json > shrink-1.log 2>&1 &
p1=$!
r0=0 r1=0
wait $p0 || r0=$?
wait $p1 || r1=$?
[ $r0 -eq 0 ] && [ $r1 -eq 0 ] && grep -q "continuing elastically on 2 data-parallel ranks" shrink-0.log &&
  grep -q '"event":"restore","tier":"durable","step":6' shrink-0/metrics.jsonl &&
  ok "no spare: the world shrank to 2 ranks, which read step 6 from the durable tier" ||
  { bad "shrink: agents $r0 $r1"; grep launch: shrink-0.log; grep -o '"event":"restore[^}]*' shrink-0/metrics.jsonl; }
losses shrink-0/metrics.jsonl > shrink.loss
python3 - ref.loss shrink.loss <<'PY' && ok "shrunk: losses within 1e-5 of the uninterrupted run's" || bad "shrunk: losses"
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
bad = len(a) != 10 or len(b) != 10
for x, y in zip(a, b):
    bad |= x[0] != y[0] or abs(float(x[1]) - float(y[1])) > 1e-5 * abs(float(x[1])) + 1e-6
sys.exit(1 if bad else 0)
PY

rm -rf "$tmp/durable"
two inplace ip.json kill:3:7 --in-place && ok "in place: both agents finished" ||
  { bad "agents exited $r0 and $r1"; tail -8 inplace-0.log inplace-1.log; }
grep -q "in-place recovery as gen 1" inplace-0.log &&
  grep -q '"event":"restore","tier":"memory","step":6' inplace-0/metrics.jsonl &&
  ok "in place: the survivors restored step 6 from memory (the spare's part from the durable tier)" ||
  bad "in place: $(grep -o '"event":"restore[^}]*' inplace-0/metrics.jsonl)"
losses inplace-0/metrics.jsonl > ip.loss
cmp -s ref.loss ip.loss && ok "in place: losses equal" || { bad "losses"; diff ref.loss ip.loss; }

rm -rf "$tmp/durable"
two bare bare.json "" && bad "without a durable tier: the agents finished"
grep -q "gen 0: every rank failed with an error of the job itself" bare-0.log &&
  ok "the agents stopped at once: every rank's error is the job's (no restart, no shrink)" ||
  { bad "the refusal was taken for a failure"; grep launch: bare-0.log; }
grep -q "checkpoint.dir: rank [0-9]* .*cannot see" bare-0.log &&
  grep -rqs "add a durable tier on one (checkpoint.tiers, kind durable)" bare-0/agent &&
  ok "without a durable tier: refused naming checkpoint.dir" ||
  { bad "no refusal without a durable tier"; tail -5 bare-0.log; }
# a peer tier beside node-local roots: rank 2 (node 1) loses its disk
# (its parts deleted) and dies at step 7; node 1's spare takes rank 2, its
# part of step 6 comes back from the replica on node 0, the rest from the
# nodes' roots
rm -rf "$tmp/durable"
mkdir rdzv-peer
LLMT_FAULT=losedisk:2:7 "$exe" launch --out peer-0 --nproc 2 --nnodes 2 --node-rank 0 \
  --rdzv rdzv-peer peer.json > peer-0.log 2>&1 &
p0=$!
LLMT_FAULT=losedisk:2:7 "$exe" launch --out peer-1 --nproc 2 --spares 1 --nnodes 2 --node-rank 1 \
  --rdzv rdzv-peer peer.json > peer-1.log 2>&1 &
p1=$!
r0=0 r1=0
wait $p0 || r0=$?
wait $p1 || r1=$?
[ $r0 -eq 0 ] && [ $r1 -eq 0 ] &&
  grep -q '"event":"restore","tier":"node-local","step":6,[^}]*"peer_restored":true' peer-0/metrics.jsonl &&
  ok "peer tier: rank 2's lost part of step 6 came back from its replica on node 0" ||
  { bad "peer tier: agents $r0 $r1"; grep -o '"event":"restore[^}]*' peer-0/metrics.jsonl; tail -5 peer-0.log; }
losses peer-0/metrics.jsonl > peer.loss
cmp -s ref.loss peer.loss && ok "peer tier: losses equal" || { bad "peer: losses"; diff ref.loss peer.loss; }
exit $fail
