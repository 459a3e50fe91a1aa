/* llmt_job's parts, shared by the files of lib/job. A job is one rank's
 * share of a training run: everything `llmtrain train` used to hold in its
 * own structs lives here so that every host (the CLI, a binding) gets the
 * same behaviour from the same code. The job drives the trainer, the
 * loader and the checkpointer through their public calls only: their
 * internals change under it (the one-engine refactor). */
#ifndef LLMT_JOB_JOB_H
#define LLMT_JOB_JOB_H

#include <stdint.h>
#include <stdio.h>

#include "core/internal.h"
#include "obs/obs.h"
#include "spec/spec.h"

#define JOB_PATH_MAX 1024

/* The data of a job (data.c): tokenizer, training and validation shards,
 * the training loader. */
typedef struct job_data {
    char desc[2048]; /* one line for a banner */
    char note[1024]; /* what preparing the corpus did ("" if reused) */
    int32_t vocab, eot;
    int64_t n_train, n_val; /* tokens */
    double unigram_entropy; /* nats/token of the training tokens */
    llmt_tokenizer *tok;
    llmt_dataset *train_ds, *val_ds;
    llmt_loader *loader;
    int T, B, A;
} job_data;

/* What the data needs from the job. */
typedef struct job_data_opts {
    const char *run_dir; /* this rank's run directory (data/ goes there) */
    const llmt_spec *spec;
    int seq_len, micro, accum;
    int32_t dp_rank, dp_size;
    int resume; /* reuse data prepared by an earlier start */
} job_data_opts;

/* One fault to inject (fault.c, $LLMT_FAULT). */
enum {
    JOB_FAULT_KILL,
    JOB_FAULT_HANG,
    JOB_FAULT_SLOW,
    JOB_FAULT_NAN,
    JOB_FAULT_BITFLIP,
    JOB_FAULT_SPIKE,
    JOB_FAULT_KILLSAVE,
    JOB_FAULT_LOSEDISK,
    JOB_FAULT_FLIPOUT,
    JOB_FAULT_SLOWSAVE
};
#define JOB_MAX_FAULTS 16
typedef struct job_fault {
    int kind;
    int32_t rank;
    int64_t step, arg;
    int gen, sticky, fired;
} job_fault;

/* Anomaly detection state: a window of recent finite losses. */
#define JOB_LOSS_WINDOW 32
#define JOB_MAX_CONSECUTIVE_ANOMALIES 8
/* What each rank sends to the gather of detect.c (aggregation): the
 * per-step means of its split since the last one. */
enum {
    JOB_AGG_WALL,
    JOB_AGG_COMPUTE,
    JOB_AGG_OPTIMIZER,
    JOB_AGG_COMM_DP,
    JOB_AGG_COMM_OTHER, /* tp + pp + cp + ep */
    JOB_AGG_DATA,
    JOB_AGG_CKPT,
    JOB_AGG_OTHER,
    JOB_AGG_MFU,
    JOB_AGG_FIELDS
};

struct llmt_job {
    llmt_err err;
    llmt_context *ctx; /* the caller's: logging, allocator */
    llmt_spec *spec;   /* our own copy */
    llmt_plan *plan;
    llmt_comm *comm; /* all ranks of the job (world > 1) */
    int own_comm;    /* 1: created here, destroyed here */
    /* This rank's groups from the plan's coordinates (TP innermost):
     * tp_comm only when tp > 1; dp_comm is comm itself when tp is 1, a
     * group of its own (owned, like tp_comm) when tp > 1 and dp > 1. */
    llmt_comm *tp_comm, *dp_comm;
    /* pipeline parallel group (pp > 1; owned; pp_attach.c) */
    llmt_comm *pp_comm;
    /* the planner's pooled gradient copies for this stage (pp_attach.c:
     * a function of the layout, counted once when the pipeline is made) */
    int pp_copies_plan;
    /* context parallel group (cp > 1; owned; cp_attach.c) */
    llmt_comm *cp_comm;
    /* expert parallel group (ep > 1; owned; ep_attach.c) */
    llmt_comm *ep_comm;
    /* the CUDA engine's data parallel group: dp_comm's NCCL twin (owned;
     * nccl_attach.c), NULL on the CPU */
    llmt_comm *dp_dev_comm;
    llmt_model *model;
    llmt_trainer *tr;
    llmt_ckpt *ck; /* local tier (root), durable copy inside */
    job_data data;
    FILE *jsonl;

    /* where this rank sits */
    int32_t world, rank, local_rank;
    /* resolved settings (the plan's degrees, batch) */
    llmt_model_config mc;
    llmt_trainer_opts to;
    int32_t dp, zero;
    int32_t tp, tp_rank, dp_rank; /* the plan's degree and coordinates */
    int32_t pp, pp_rank;          /* pipeline degree, this rank's stage */
    int32_t cp;                   /* context parallel degree */
    int64_t steps, stop_at, start_step;
    int64_t ckpt_interval; /* steps; 0 none; < 0 auto, undecided */
    int ckpt_auto, ckpt_async;
    int32_t keep_last, keep_every, durable_keep_last, durable_keep_every;
    int peer_tier; /* checkpoint.tiers has a peer tier: replicate each save */
    /* the peer tier's path: this node's replicas; "": ROOT/peer */
    char peer_dir[JOB_PATH_MAX];
    int64_t params;
    int threads;

    char name[256];
    char run_dir[JOB_PATH_MAX];  /* this rank's */
    char root_dir[JOB_PATH_MAX]; /* rank 0's (the run's) */
    char ckpt_dir[JOB_PATH_MAX];
    char durable_dir[JOB_PATH_MAX]; /* "" without a durable tier */
    char jsonl_path[JOB_PATH_MAX], plot_path[JOB_PATH_MAX];
    char interval_note[512]; /* how the auto interval was chosen */
    char resume_note[JOB_PATH_MAX + 256];
    /* the tier the last restore read (memory, peer, local, durable) and
     * how long it took (ckpt.c) */
    const char *restore_tier;
    double restore_s;

    /* the run */
    int32_t *in, *tg, *vin, *vtg;
    int nval;
    int began;   /* a step or the step-0 evaluation ran */
    int resumed; /* llmt_job_resume succeeded once */
    int fresh;   /* opts.fresh */
    double t_start;
    int64_t last_saved;                  /* newest step this job saved (-1) */
    double first_stall_s, first_write_s; /* measured on the first save */
    double auto_stall_s, auto_write_s, auto_mtbf_s, auto_step_s, auto_interval_s;
    double step_s_sum;
    int64_t step_s_n;
    llmt_job_metrics last;
    double flops_per_step, peak_flops; /* for MFU (plan) */

    /* anomaly policy */
    float losses[JOB_LOSS_WINDOW];
    int nloss, loss_pos;
    int consecutive;
    int64_t anomalies, skipped, rollbacks;

    /* drills (fault.c) */
    job_fault faults[JOB_MAX_FAULTS];
    int nfault, launch_gen;
    double hb_first; /* unix time of this process's first heartbeat */

    /* detection beyond NaN and loss spikes (detect.c) */
    float gnorms[JOB_LOSS_WINDOW]; /* recent gradient norms */
    int ngn, gn_pos;
    double lr_mult; /* product of the lower_lr factors (0: 1) */
    int64_t lr_lowered;
    int64_t sdc_checks, sdc_mismatches;
    int32_t *replica_grp; /* llmt__job_replica_groups' (sdc_hash.c) */
    /* the ZeRO-3 check's one-step snapshot (sdc_step.c, sdc_replay step):
     * shares, their capacity in floats, the batch (inputs, then targets),
     * the step it serves (-1: none) and the trainer's step it holds */
    float *sdc_snap;
    size_t sdc_snap_cap;
    int32_t *sdc_snap_in;
    int64_t sdc_snap_for, sdc_snap_step;
    int64_t sdc_snap_anom; /* j->anomalies when the copy was taken */
    /* the window's base (sdc_base.c, in sdc_snap's copy): held (1), its job
     * step, the trainer's step, the step its hook expects next, the
     * anomalies counted when it was taken and the loader's position */
    int sdc_base_ok;
    int64_t sdc_base_at, sdc_base_tstep, sdc_base_next, sdc_base_anom;
    llmt_loader_state sdc_base_data;
    double strag_busy, strag_wall; /* busy and wall seconds since the last report */
    int64_t strag_steps;
    int32_t *strag_streak; /* reports in a row named, per rank (world entries) */
    int64_t stragglers;
    int flipout_bit; /* fault.c: 1 + the bit to flip after this step (flipout) */
    /* fault.c: the victim tensor as it was before a spike or nan drill
     * changed it for one step, put back after that step (NULL: none) */
    float *victim_copy;
    /* goodput of this process (run.c) */
    double gp_productive_s, gp_stall_s, gp_lost_s, gp_checks_s;
    int64_t gp_lost_steps;
    /* the end of the previous step's compute plus its save's stall; 0 at
     * the start, after an anomaly's action and after an in-place recovery:
     * a step's cycle (the step line's cycle_s) runs from there, so per-step
     * overheads count as work, as in the goodput simulator, and saves and
     * recoveries do not */
    double gp_cycle_from;
    /* observability (perf.c, lib/obs) */
    struct llmt__obs *obs;
    int obs_timed; /* the trainer runs on the timed op table */
    int obs_started;
    llmt_job_obs_opts obs_opts;
    /* each group's communicator, for its exposed time and its trace lane:
     * [LLMT_JOB_GROUP_DP] is comm; a tensor-parallel group goes in
     * [LLMT_JOB_GROUP_TP] */
    llmt_comm *group_comm[LLMT_JOB_GROUPS];
    char trace_path[JOB_PATH_MAX + 64], prom_path[JOB_PATH_MAX + 64];
    char run_jsonl_path[JOB_PATH_MAX + 64];
    double peak_device; /* FLOP/s of one device, for realized MFU */
    double hw_flops_per_step, tokens_per_step;
    int64_t mem_peak;
    llmt_job_perf perf;
    double agg[JOB_AGG_FIELDS]; /* sums of the split since the last gather */
    int64_t agg_steps, agg_first;
};

/* refuse.c: every key the job cannot honour, refused by JSON path. */
llmt_status llmt__job_check_spec(llmt_job *j);
/* The spec against the communicator the caller lends (llmt_job_opts.comm;
 * NULL: none): a timeout it does not have is refused by key. */
llmt_status llmt__job_check_caller_comm(llmt_job *j, const llmt_comm *c);

/* data.c */
llmt_status llmt__job_data_open(llmt_job *j, job_data *d, const job_data_opts *o);
llmt_status llmt__job_data_next(llmt_job *j, job_data *d, int32_t *in, int32_t *tg);
int llmt__job_data_val(job_data *d, int32_t *in, int32_t *tg, int nmax);
llmt_status llmt__job_data_ckpt_read(llmt_job *j, job_data *d, llmt_ckpt *ck);
void llmt__job_data_free(job_data *d);

/* ckpt.c: saves, the auto interval, resume and rollback. */
llmt_status llmt__job_ckpt_open(llmt_job *j);
/* ckpt_shared.c: every rank sees one checkpoint root (collective over the
 * world group; one rank: nothing to check). */
#define LLMT_JOB_PROBE_MAX 1024
llmt_status llmt__job_ckpt_shared(llmt_job *j);
llmt_status llmt__job_save(llmt_job *j, int async);
/* After the step that finished at `done`: save when the interval says so
 * (the first auto save measures the stall). `last` forces a sync save. */
llmt_status llmt__job_maybe_save(llmt_job *j, int64_t done, int last, llmt_job_metrics *m);
/* Restore the newest usable checkpoint (local tier, then durable).
 * with_data: also the loader's position (resume); 0 keeps the loader
 * where it is (rollback skips the data since). *step: the step restored,
 * -1 when there is no checkpoint at all. */
llmt_status llmt__job_restore(llmt_job *j, int with_data, int64_t *step);

/* Move step directories newer than `step` (-1: all) of the local root to
 * its quarantine (rank 0; the others wait), noting it in resume_note. */
llmt_status llmt__job_quarantine(llmt_job *j, int64_t step);

/* fault.c: $LLMT_FAULT parsed at creation; before(step) fires what is due
 * on this rank just before `step` runs, after() undoes a NaN injection;
 * the heartbeat file ($LLMT_HEARTBEAT_FILE) rewritten after each step. */
llmt_status llmt__job_fault_parse(llmt_job *j);
llmt_status llmt__job_fault_before(llmt_job *j, int64_t step);
void llmt__job_fault_after(llmt_job *j);
/* After a save of `step` began: a killsave drill dies with it in flight. */
void llmt__job_fault_saved(llmt_job *j, int64_t step);
/* Before this rank writes its part of `step`: a slowsave drill's delay. */
void llmt__job_fault_saving(llmt_job *j, int64_t step);
void llmt__job_heartbeat(llmt_job *j, int64_t step);

/* detect.c: gradient-norm spikes, the lower_lr policy, the SDC check
 * (every fault_tolerance.sdc_interval steps) and the straggler report
 * (every fault_tolerance.straggler.interval steps). Each returns an error
 * when the run must stop (policy stop, a straggler past its patience). */
double llmt__job_window_z(const float *w, int n, float x);
void llmt__job_window_add(float *w, int *n, int *pos, float x);
llmt_status llmt__job_lower_lr(llmt_job *j, int64_t at, const char *why);
/* This rank's parameters as one xxh64 (detect.c); collective where the
 * host copy must be made current first. */
llmt_status llmt__job_params_hash(llmt_job *j, uint64_t *out);
/* This rank's hash (its parameters, or under ZeRO-3 `shares`:
 * llmt__job_shares_hash) into *mine and every rank's, all-gathered, into
 * a new array of world entries *all (the caller frees it); the replica
 * groups made (llmt__job_replica_groups). ready: 0 when the caller has no
 * memory for what follows the gather. A rank that cannot hash or has no
 * memory is agreed on before the gather (llmt__job_agree): every rank
 * returns its failure together. Collective. */
llmt_status llmt__job_hashes(llmt_job *j, int shares, int ready, uint64_t *mine,
                             uint64_t **all);
/* Before a collective that a rank may not be able to join (a failed
 * allocation, its own hash): every rank learns of the lowest failing one,
 * so that all return together instead of the others waiting in the
 * collective until its timeout. mine: this rank's status so far (its
 * message on j->err, which it keeps). LLMT_OK when every rank's is; else
 * the others fail with that rank's status and a message "WHAT: rank R
 * failed ...". Collective over j->comm. */
llmt_status llmt__job_agree(llmt_job *j, llmt_status mine, const char *what);
/* A rank's own failure in the job's creation, before a collective it
 * would not join (job.c: before the groups are made, and before the
 * restore), agreed on by every rank: LLMT_OK when none failed; when all
 * did, each its own status and message (mine); else the failing ranks'
 * messages prefixed "rank R: ", the others failing with the lowest
 * failing rank's status and message. The ranks of an in-place recovery
 * call it with LLMT_OK where a spare's creation does. Collective. */
llmt_status llmt__job_agree_own(llmt_job *j, llmt_status mine);
/* Every rank's replica group (the plan's DP group id, world entries;
 * NULL without memory): the ranks of a group hold the same parameters,
 * shard for shard, and must hash alike. Made at the first call and kept on
 * the job (sdc_hash.c) until llmt__job_replica_forget (the communicators
 * dropped: inplace.c; the job destroyed). */
const int32_t *llmt__job_replica_groups(llmt_job *j);
void llmt__job_replica_forget(llmt_job *j);
/* One xxh64 over this rank's tensors (sdc_hash.c): `part` adds parameter
 * i's bytes (whatever the check hashes of it) to the state, for every
 * parameter of the model in order; the walk stops at a part that fails
 * (its message on the job), as a hash without it is not this rank's. */
struct XXH64_state_s;
typedef llmt_status (*job_hash_part)(llmt_job *j, int32_t i, struct XXH64_state_s *h);
llmt_status llmt__job_xxh_walk(llmt_job *j, job_hash_part part, uint64_t *out);
llmt_status llmt__job_sdc(llmt_job *j, int64_t step, llmt_job_metrics *m);
/* step_s: the step's wall seconds; comm_s: the communicator's seconds
 * within that same window (run.c reads them around the step) */
llmt_status llmt__job_straggler(llmt_job *j, int64_t step, double step_s, double comm_s);
/* The per-rank lists of the checks (detect.c), whole at any world size:
 * tooling reads a metrics array as every rank, so none is ever cut.
 * s: a growing string (llmt__sbuf, core/internal.h; its oom flag set when
 * it could not grow: the caller must not write the line then).
 * replica_majorities: maj[r] the first rank of r's replica group (grp)
 * whose hash (all) more than half of the group holds, -1 when none does;
 * mem: scratch of world entries. sdc_bad_ranks: the ranks whose hash is
 * not their group's majority, as "r,r,..." appended to s; their count.
 * rank_list: the ranks flagged in flag[0..world) the same way.
 * hex_list: every rank's hash as "\"%016llx\",...". list_brief: a list's
 * first `shown` ranks, then " and N more", into out (a log line's or an
 * error message's: those may be short, the metrics line may not). */
void llmt__job_replica_majorities(const uint64_t *all, const int32_t *grp, int32_t world,
                                  int32_t *maj, int32_t *mem);
int32_t llmt__job_sdc_bad_ranks(llmt__sbuf *s, const uint64_t *all, const int32_t *majr,
                                int32_t world);
int32_t llmt__job_rank_list(llmt__sbuf *s, const uint8_t *flag, int32_t world);
void llmt__job_hex_list(llmt__sbuf *s, const uint64_t *h, int32_t world);
void llmt__job_list_brief(char *out, size_t cap, const char *list, int shown);
/* sdc_replay.c: in deterministic mode, after the hashes `orig` (one per
 * rank) disagreed at `step` (under ZeRO-3: at every check, `orig` being
 * the share hashes): every rank restores the newest snapshot (its step in
 * *from; nothing replayed when that is not before `step`) and runs the
 * steps to `step` again; the ranks whose replayed hash differs from their
 * own (*nbad of them) are named (metrics "sdc_replay"). *handled = 1 when
 * the replays agree (the run goes on from them); 0 when there was nothing
 * to replay from or they disagree (the anomaly policy decides).
 * Collective. */
llmt_status llmt__job_sdc_replay(llmt_job *j, int64_t step, const uint64_t *orig, int *handled,
                                 int *nbad, int64_t *from);
/* sdc_replay.c: the replay's "sdc_replay" metrics line (event, step,
 * from, not_reproducible: the ranks whose hashes orig and rep differ,
 * agree, action, xxh and replay_xxh: every rank's hashes of j->world) and
 * the first of those ranks for a log line in brief (cap bytes). The count
 * of those ranks; -1 without memory for the line (nothing written). */
int32_t llmt__job_sdc_replay_line(llmt_job *j, int64_t step, int64_t from, const uint64_t *orig,
                                  const uint64_t *rep, int agree, const char *action,
                                  char *brief, size_t cap);
/* sdc_shares.c: the check under ZeRO-3, where no rank holds a replica:
 * this rank's shares of the parameters and moments as one xxh64, and the
 * check itself (every rank replays the steps since the newest snapshot and
 * compares its shares' hash with its own first one). */
llmt_status llmt__job_shares_hash(llmt_job *j, uint64_t *out);
llmt_status llmt__job_sdc_shares(llmt_job *j, int64_t step, llmt_job_metrics *m);
/* sdc_step.c: the ZeRO-3 check's one-step snapshot. snap: before step
 * `step` runs (its batch read, before injected faults), when the check
 * comes after it: this rank's shares, the trainer's step and the batch.
 * step_replay: at the check of `step`, back to that snapshot and the step
 * run again (collective); *from the trainer step it replayed from, -1
 * without a snapshot of this step. free: the snapshot and the replica
 * groups (job destroy). */
llmt_status llmt__job_sdc_snap(llmt_job *j, int64_t step);
llmt_status llmt__job_sdc_step_replay(llmt_job *j, int64_t step, int64_t *from);
void llmt__job_sdc_free(llmt_job *j);
/* sdc_step.c: this rank's shares (parameters, m, v) into the copy both
 * replays use (grown as needed) and back (collective: the engine and data
 * parallelism take them up). */
llmt_status llmt__job_shares_keep(llmt_job *j);
/* The copy's memory, where a ZeRO-3 check will take it, at the job's
 * creation with the engine (job.c's make_engine agrees on it): taken in
 * the step, a rank without it failed alone and the others waited in the
 * step's collectives until their timeout. */
llmt_status llmt__job_shares_reserve(llmt_job *j);
llmt_status llmt__job_shares_put(llmt_job *j);
/* sdc_base.c: the ZeRO-3 window's base. base: at the start of each step
 * (before its batch is read), the state `start` when the newest checked
 * state is not the one this step starts from (after a check, at the first
 * step, after a restore or an anomaly's action). base_replay: at the check
 * of `step`, every rank back to it (collective; *from its job step, -1
 * when the ranks hold none alike); the base is used up. drop: a restore
 * changed the state. */
llmt_status llmt__job_sdc_base(llmt_job *j, int64_t start);
llmt_status llmt__job_sdc_base_replay(llmt_job *j, int64_t step, int64_t *from);
void llmt__job_sdc_base_drop(llmt_job *j);

/* metrics.c: metrics.jsonl, appended and never rewritten. */
llmt_status llmt__job_metrics_open(llmt_job *j);
void llmt__job_metrics_line(llmt_job *j, const char *fmt, ...) LLMT_PRINTF(2, 3);
/* moe_metrics.c: the step's per-expert token counts line (MoE models). */
void llmt__job_moe_line(llmt_job *j, int64_t step);
/* plot.c: the SVG plot from metrics.jsonl (latest line per step wins). */
llmt_status llmt__job_plot(llmt_job *j);

/* perf.c: the step's split, realized MFU, trace, Prometheus textfile,
 * the run-level stream (lib/obs does the measuring). Marks of one step: */
typedef struct job_marks {
    double t_begin, t_data, t_step0, t_step1, t_save0, t_save1, t_end; /* monotonic */
    double u_begin, u_data, u_step0, u_step1, u_save0, u_save1;        /* unix, trace */
    double op0[LLMT__OBS_KINDS], op1[LLMT__OBS_KINDS];
    double comm0[LLMT_JOB_GROUPS], comm1[LLMT_JOB_GROUPS];
} job_marks;
/* The trainer on the timed op table (job creation). */
llmt_status llmt__job_trainer_create(llmt_job *j);
/* The op table train.device names when llmt_job chooses it itself (the
 * host emulation, staged as a GPU's, for "emulated"); NULL: the one
 * llmt_trainer_opts.device selects (cpu, cuda). */
const struct llmt__dev_ops *llmt__job_dev_table(const llmt_job *j);
void llmt__job_obs_free(llmt_job *j);
/* Before the first step: calibration, trace file, paths. */
llmt_status llmt__job_obs_start(llmt_job *j);
/* Before step `step` runs: the trace on when it is in range. */
void llmt__job_obs_before(llmt_job *j, int64_t step);
/* Snapshot the ops' and collectives' clocks (which 0: before the trainer
 * step, 1: after). */
void llmt__job_obs_mark(llmt_job *j, job_marks *k, int which);
/* After a completed step: the split into j->perf, metrics.jsonl, the
 * textfile, the trace. */
llmt_status llmt__job_obs_step(llmt_job *j, const job_marks *k, const llmt_job_metrics *m);
/* Rank 0: one line of the run-level stream from every rank's means
 * (JOB_AGG_FIELDS floats per rank, `all`); detect.c gathers them. */
void llmt__job_obs_run_line(llmt_job *j, int64_t step, const float *all, int32_t ranks,
                            int stride, const char *stragglers);
/* The interval of the gather (aggregation and straggler report). */
int64_t llmt__job_obs_interval(const llmt_job *j);

/* job.c: the tp/dp groups cut from j->comm and attached to the trainer
 * (collective over j->comm). */
llmt_status llmt__job_attach_groups(llmt_job *j);
/* pp_attach.c: the world a pipeline needs (tp x pp x dp ranks; errors
 * name the key), and the PP group cut from j->comm and attached to the
 * trainer with parallelism.pp_schedule and stage_layers (collective over
 * j->comm). */
llmt_status llmt__job_pp_layout(llmt_job *j);
llmt_status llmt__job_attach_pp(llmt_job *j);
/* After the engine is made: j->pp_copies_plan (pp_attach.c). */
void llmt__job_pp_copies_plan(llmt_job *j);
/* The step's pipeline line (pp > 1): this stage's bubble. */
void llmt__job_pp_line(llmt_job *j, int64_t step);
/* cp_attach.c: the context parallel group (and, without tensor
 * parallelism, the data parallel one) cut from j->comm, the trainer
 * attached to it with parallelism.cp_variant (collective over j->comm). */
llmt_status llmt__job_attach_cp(llmt_job *j);
/* nccl_attach.c: the GPU this rank drives (its local rank modulo the
 * GPUs it sees), and the NCCL twin of a host group (collective over it;
 * `what` names the group in errors). */
int32_t llmt__job_cuda_ordinal(const llmt_job *j);
llmt_status llmt__job_device_group(llmt_job *j, llmt_comm *host, const char *what,
                                   llmt_comm **dev);
/* The expert parallel group (ep > 1): from the plan, attached to the
 * trainer (ep_attach.c). */
llmt_status llmt__job_attach_ep(llmt_job *j);

/* inplace.c: under `llmtrain launch --in-place` ($LLMT_LAUNCH_INPLACE),
 * a step whose collectives failed (a peer died) re-forms the communicator
 * with the agent's next generation and restores the newest step every
 * rank holds (this rank's snapshot where it has it) instead of ending the
 * process. 1 when `failed` is such a failure and recovery is enabled. */
int llmt__job_inplace_wanted(const llmt_job *j, llmt_status failed);
llmt_status llmt__job_inplace_recover(llmt_job *j, llmt_job_metrics *m);

/* Small helpers (job.c). */
int llmt__job_mkdir_p(const char *path);
double llmt__job_now(void);

#endif
