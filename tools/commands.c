/* The subcommand table. Each module adds one entry and a cmd_<name>.c. */
#include "cli.h"

const cli_command cli_commands[] = {
    {"version", "print the library, header and ABI versions",
     "usage: llmtrain version [--json]\n"
     "  Prints the version of the loaded libllmtrain, of the header the tool\n"
     "  was built with, and the ABI version.\n"
     "  --json   one JSON object instead of text\n",
     cmd_version},
    {"features", "list what this build and machine can do",
     "usage: llmtrain features [--json]\n"
     "  Lists the optional features compiled in (cuda, nccl, mpi, aio,\n"
     "  openblas, openmp) and the CUDA devices visible now.\n"
     "  --json   one JSON object instead of text\n",
     cmd_features},
    /* plan: owned by lib/plan (issue 4) */
    {"plan", "show the parallel layout, memory, step time and goodput of a job",
     "usage: llmtrain plan SPEC.json [--world N] [--auto] [--simulate] [--json]\n"
     "                     [--hours H] [--interval S] [--trials N] [--seed S]\n"
     "       llmtrain plan SPEC.json --explain [--world N]\n"
     "       llmtrain plan --keys\n"
     "  Places the spec on N GPUs and prints the layout (rank order, stage\n"
     "  layers), memory per GPU by kind, FLOPs, communication per step,\n"
     "  pipeline bubble, step time, tokens/s, MFU, checkpoint interval and\n"
     "  goodput (doc/planner.md explains every formula).\n"
     "  --world N    GPUs (default: tp*pp*dp*cp of the spec; a spec without\n"
     "               parallelism.dp gets dp = N/(tp*pp*cp); a spec with\n"
     "               another dp is reshaped: tp, cp, pp and the global\n"
     "               batch kept, grad_accum changed)\n"
     "  --auto       search tp, cp, pp, dp, ep, zero, recompute, virtual\n"
     "               stages and micro for the fastest layout that fits, and\n"
     "               say why it wins\n"
     "  --explain    the spec's layout beside the planner's top 5, the step\n"
     "               split into terms (compute, recompute, TP/SP, bubble, PP\n"
     "               p2p, DP, ZeRO-3, stragglers, ...), the predicted gain\n"
     "               and the terms it comes from (a calibration file too)\n"
     "  --simulate   Monte-Carlo goodput under failures; sweeps the\n"
     "               checkpoint interval around Young/Daly\n"
     "  --hours H    training work to simulate [the run, at most a year]\n"
     "  --interval S checkpoint interval to simulate, seconds [the plan's]\n"
     "  --trials N   simulated runs per interval [32]\n"
     "  --seed S     simulation seed [train.seed + 1]\n"
     "  --json       the plan (and goodput) as one JSON object\n"
     "  --keys       list every job spec key: type, values, meaning [default]\n",
     cmd_plan},
    /* data: owned by lib/data (issue 5) */
    {"data", "prepare, inspect and tokenize training data",
     "usage: llmtrain data prepare INPUT... --out DIR [options]\n"
     "       llmtrain data stats PATH... [--verify]\n"
     "       llmtrain data train-bpe INPUT... --vocab N --out FILE\n"
     "                               [--doc-sep LINE] [--text-field KEY]\n"
     "                               [--sample-mb N]\n"
     "       llmtrain data synth --out FILE --bytes N [--alphabet A]\n"
     "                           [--branching K] [--seed S]\n"
     "  (doc/data.md)\n"
     "  prepare    ingest text files, directories and JSONL, filter,\n"
     "             deduplicate, tokenize, write DIR/train and DIR/val token\n"
     "             shards, DIR/tokenizer.bin and DIR/report.json; a progress\n"
     "             bar on a terminal, then the report. DIR must not hold a\n"
     "             prepared dataset already.\n"
     "    --tokenizer bytes|gpt2:DIR|bpe:N|FILE\n"
     "                         bytes [default]; GPT-2 from DIR/encoder.json\n"
     "                         and DIR/vocab.bpe; a BPE of N tokens learned\n"
     "                         from the first --bpe-sample-mb MB [32]; or a\n"
     "                         tokenizer file of ours\n"
     "    --doc-sep LINE       a line separating documents in text files\n"
     "                         (e.g. % for fortunes) [one document a file]\n"
     "    --text-field KEY     JSONL key of the text [text]\n"
     "    --dedup exact,near|exact|near|none   [exact,near]\n"
     "    --shingle N --permutations N --bands N --threshold X\n"
     "                         MinHash/LSH [5, 128, 16, 0.8]\n"
     "    --filter none        keep every document, or set thresholds\n"
     "                         (0 turns one off):\n"
     "    --min-chars N --max-chars N [16, 0]\n"
     "    --max-nonalpha F --max-dup-lines F --max-top-ngram F\n"
     "                         [0.5, 0.3, 0.2]\n"
     "    --ngram-min-words N  the 2-gram filter skips shorter documents\n"
     "                         [50]\n"
     "    --val-frac F         share of documents for validation [0.01]\n"
     "    --shard-tokens N     tokens per shard [67108864]\n"
     "    --llmc               llm.c token files (.bin, vocab <= 65536)\n"
     "    --seed N             validation split seed [1337]\n"
     "    --quiet              no progress bar, no report\n"
     "  stats      shards, tokens, documents, vocab, dtype, tokens per\n"
     "             document of a prepared DIR (and its report.json), a shard\n"
     "             directory, file or glob; --verify checks the checksums\n"
     "  train-bpe  learn a byte-level BPE of N tokens from the first\n"
     "             --sample-mb MB [64] of the documents; save it to FILE\n"
     "  synth      N bytes of a seeded Markov source over A letters [8]\n"
     "             with K successors each [3], seed S [1]; prints its\n"
     "             exact entropy rate\n",
     cmd_data},
    /* train: owned by lib/train (issue 6) */
    {"train", "train a model from a job spec",
     "usage: llmtrain train SPEC.json [--out DIR] [--resume] [--fresh]\n"
     "                      [--steps N] [--threads N] [--trace A-B|N]\n"
     "                      [--prom FILE] [--no-op-timing]\n"
     "  Trains the spec's model on the CPU (doc/training.md): data from\n"
     "  data.train, token shards (llmtrain data prepare) or text, prepared\n"
     "  into DIR/data (default corpus /usr/share/games/fortunes); progress\n"
     "  line, metrics JSONL, validation loss, checkpoints, sample text and a\n"
     "  loss plot (SVG), all in DIR.\n"
     "  --out DIR    run directory [runs/<spec name>]; relative paths of\n"
     "               checkpoint.dir and metrics.* are taken inside it\n"
     "  --resume     continue from the newest checkpoint in DIR (under\n"
     "               mpirun: one sharded checkpoint in rank 0's DIR, which\n"
     "               resumes under another process count, or none, with the\n"
     "               same global batch; doc/checkpointing.md). Newer step\n"
     "               directories that are broken or were never committed\n"
     "               are moved to DIR/ckpt/quarantine (with a REASON file).\n"
     "               With no usable checkpoint it stops and lists why each\n"
     "               step is unusable; metrics.jsonl is appended to\n"
     "  --fresh      start from step 0 although DIR holds checkpoints that\n"
     "               are all unusable (they are quarantined, never deleted;\n"
     "               a valid one makes it refuse)\n"
     "  --steps N    stop after step N, 1..train.steps (the LR schedule\n"
     "               keeps train.steps)\n"
     "  --threads N  CPU threads (default: train.threads, 0 = all)\n"
     "  --trace A-B  Chrome/Perfetto trace of steps A..B (N: the first N\n"
     "               steps of this run) in DIR/trace-rank<R>.json\n"
     "  --prom FILE  Prometheus textfile [DIR/metrics.prom]; llmtrain report\n"
     "               DIR draws the run (doc/observability.md)\n"
     "  --no-op-timing  do not time the engine's ops (their time is then\n"
     "               unaccounted in the split; bench/obs/obs_overhead.py)\n",
     cmd_train},
    /* report: observability (issue 20) */
    {"report", "an HTML page of a run: loss, MFU, tokens/s, time split, ranks",
     "usage: llmtrain report RUN_DIR [--out FILE.html]\n"
     "  Writes RUN_DIR/report.html (self-contained, inline SVG) from the\n"
     "  metrics.jsonl of every rank and run.jsonl: loss and validation loss,\n"
     "  realized MFU, tokens/s, a per-rank step-time heatmap, the time split\n"
     "  as stacked bars, events on the step axis, and the planner's\n"
     "  predicted step time, memory and MFU beside the measured ones\n"
     "  (doc/observability.md).\n",
     cmd_report},
    /* launch: the fault-tolerance agent (issue 19) */
    {"launch", "run a job on N workers + S spares, restarting it on failures",
     "usage: llmtrain launch [--nproc N] [--spares S] [--max-restarts R]\n"
     "                       [--heartbeat-timeout SEC] [--in-place] [--expect-mtbf SEC]\n"
     "                       [--nnodes N --node-rank K --rdzv DIR] SPEC.json [train flags]\n"
     "  Starts N workers, each `llmtrain train SPEC` with RANK/WORLD_SIZE and a\n"
     "  Gloo rendezvous store in DIR/agent (needs the gloo build feature), and\n"
     "  keeps S spare slots. A worker killed, stopped, silent for SEC seconds\n"
     "  (default fault_tolerance.collective_timeout_s) or failing makes the\n"
     "  agent kill the gang, quarantine the slot, promote a spare to its rank\n"
     "  and restart every rank from the newest checkpoint (--resume). Without\n"
     "  spares it continues on fewer data-parallel ranks with the same global\n"
     "  batch, or stops saying why. R (default fault_tolerance.max_restarts)\n"
     "  bounds the restarts. --in-place: survivors keep their processes,\n"
     "  re-form the communicator with the promoted spare (generation file in\n"
     "  DIR/agent) and restore from their in-memory snapshot; the agent falls\n"
     "  back to a gang restart when it cannot. --expect-mtbf: the job-wide MTBF\n"
     "  a drill injects, for a second goodput prediction (bench/ft/drill.sh).\n"
     "  --nnodes N --node-rank K --rdzv DIR: one agent per node, N of them,\n"
     "  agreeing through DIR (a shared directory, new per job): node 0 decides\n"
     "  each generation (a spare on the failed rank's node first, else any),\n"
     "  every agent starts its node's ranks; gang restarts only. N and K not\n"
     "  given: from SLURM_NNODES/SLURM_NODEID, OMPI_COMM_WORLD_SIZE/RANK or\n"
     "  PMI_SIZE/PMI_RANK (one agent per node). Train flags: --out DIR\n"
     "  --steps N --threads N --resume --fresh. Events: DIR/agent/events.jsonl; worker logs:\n"
     "  DIR/agent/genG-rankR.log. Drills: LLMT_FAULT (doc/fault-tolerance.md).\n",
     cmd_launch},
    /* ckpt: owned by lib/ckpt (issue 7) */
    {"ckpt", "list, verify, inspect, export and prune checkpoints",
     "usage: llmtrain ckpt SUBCOMMAND DIR [options]\n"
     "  DIR is a checkpoint root (step-NNNNNNNNNNNN directories) or one step\n"
     "  directory. Exit status 1 when something is bad, 2 on usage errors.\n"
     "  ls DIR [--json]              every step: ranks, bytes, tensors, status\n"
     "                               (ok, incomplete, or BAD with the reason)\n"
     "  verify DIR [--step N]        hash every chunk of every (or one) step\n"
     "  inspect DIR [--step N] [--chunks] [--json]\n"
     "                               plan, key/values, tensors (and placement)\n"
     "  export DIR --out FILE [--format safetensors|llmc] [--step N]\n"
     "         [--heads H] [--vocab-size V] [--prefix P]\n"
     "                               consolidated safetensors, or an llm.c\n"
     "                               GPT-2 model file (tensors P+name, default\n"
     "                               prefix param/)\n"
     "  prune DIR --keep-last K [--keep-every N]\n"
     "                               remove older steps and stale partial ones\n"
     "  Without --step the newest complete checkpoint is used.\n",
     cmd_ckpt},
    /* comm: owned by lib/comm (issue 8) */
    {"comm", "communicator self-test and flight-recorder tools",
     "usage: llmtrain comm env\n"
     "       llmtrain comm selftest [--ranks N] [--bytes N] [--iters N]\n"
     "                              [--timeout-ms N]\n"
     "       llmtrain comm dump FILE...\n"
     "  env       rank, world size and launcher as read from the environment\n"
     "  selftest  all-reduce, all-gather, reduce-scatter, broadcast, barrier\n"
     "            checked and timed; ranks are N threads [2], or the job's\n"
     "            processes under mpirun/srun (MPI backend)\n"
     "  dump      read flight-recorder dumps (LLMT_COMM_DUMP_PATH.<rank>,\n"
     "            written on a timeout) and name the ranks that did not\n"
     "            reach the failing sequence number (doc/comm.md)\n",
     cmd_comm},
};

const size_t cli_command_count = sizeof cli_commands / sizeof cli_commands[0];
