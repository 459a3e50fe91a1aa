/* llmtrain ckpt: list, verify, inspect, export and prune checkpoints
 * (lib/ckpt; doc/checkpointing.md, doc/checkpoint-format.md). DIR is a
 * checkpoint root (holding step-NNNNNNNNNNNN directories) or one step
 * directory. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char *const CMD = "ckpt";

typedef struct ck_args {
    const char *sub, *dir, *out, *format, *prefix;
    long long step;      /* -1: latest */
    long heads, vocab, keep_last, keep_every;
    int json, chunks, have_keep_last;
    const char *given[32]; /* the options given, checked against the subcommand's */
    int ngiven;
} ck_args;

static int parse_ll(const char *flag, const char *v, long long lo, long long hi,
                    long long *out)
{
    int64_t x = 0;
    int rc = cli_parse_i64(flag, v, lo, hi, &x);
    if (rc == CLI_OK) *out = x;
    return rc;
}

/* Every option is parsed for every subcommand, so one the subcommand does
 * not read (ls --out, inspect --keep-last, export --heads of a
 * safetensors file) would be accepted and ignored: refused by name. */
static const char *sub_flags(const char *sub)
{
    if (!strcmp(sub, "ls") || !strcmp(sub, "verify"))
        return " --step --json ";
    if (!strcmp(sub, "inspect"))
        return " --step --chunks --json ";
    if (!strcmp(sub, "export"))
        return " --out -o --format --step --heads --vocab-size --prefix ";
    if (!strcmp(sub, "prune"))
        return " --keep-last --keep-every ";
    return NULL;
}

static int check_sub_flags(const ck_args *a)
{
    const char *allowed = sub_flags(a->sub);
    if (!allowed)
        return CLI_OK; /* the unknown subcommand is reported by cmd_ckpt */
    for (int k = 0; k < a->ngiven; k++) {
        char key[64];
        snprintf(key, sizeof key, " %s ", a->given[k]);
        if (strstr(allowed, key))
            continue;
        fprintf(stderr, "llmtrain ckpt %s: %s does not apply to %s (its options:%.*s)\n",
                a->sub, a->given[k], a->sub, (int)strlen(allowed) - 1, allowed);
        return CLI_USAGE;
    }
    int llmc_opt = 0; /* what only the llm.c writer reads */
    for (int k = 0; k < a->ngiven; k++)
        llmc_opt |= !strcmp(a->given[k], "--heads") || !strcmp(a->given[k], "--vocab-size") ||
                    !strcmp(a->given[k], "--prefix");
    if (llmc_opt && a->format && strcmp(a->format, "llmc")) {
        fprintf(stderr, "llmtrain ckpt export: --heads, --vocab-size and --prefix shape the "
                        "llm.c file: they need --format llmc\n");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* A value option given a second time (-o and --out are one) would
 * silently replace the first: refused, as is a list of options longer
 * than `given` holds (the rest would escape check_sub_flags). */
static int note_flag(ck_args *a, const char *s)
{
    int sw = !strcmp(s, "--json") || !strcmp(s, "--chunks");
    const char *c = !strcmp(s, "-o") ? "--out" : s;
    for (int k = 0; k < a->ngiven && !sw; k++)
        if (!strcmp(!strcmp(a->given[k], "-o") ? "--out" : a->given[k], c)) {
            fprintf(stderr,
                    "llmtrain ckpt: %s given twice (the second value would replace "
                    "the first); give it once\n",
                    s);
            return CLI_USAGE;
        }
    if (a->ngiven == (int)(sizeof a->given / sizeof a->given[0])) {
        fprintf(stderr, "llmtrain ckpt: more than %d options\n", a->ngiven);
        return CLI_USAGE;
    }
    a->given[a->ngiven++] = s;
    return CLI_OK;
}

static int parse_args(int argc, char **argv, ck_args *a)
{
    memset(a, 0, sizeof *a);
    a->step = -1;
    a->format = "safetensors";
    a->prefix = "param/";
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x = 0;
        int rc = CLI_OK;
        if (s[0] == '-' && s[1] && (rc = note_flag(a, s)) != CLI_OK)
            return rc;
        if (!strcmp(s, "--step")) {
            rc = parse_ll(s, v, 0, (INT64_C(1) << 40) - 1, &a->step);
            i++;
        } else if (!strcmp(s, "--out") || !strcmp(s, "-o")) {
            a->out = v;
            i++;
        } else if (!strcmp(s, "--format")) {
            a->format = v;
            i++;
        } else if (!strcmp(s, "--prefix")) {
            a->prefix = v;
            i++;
        } else if (!strcmp(s, "--heads")) {
            rc = parse_ll(s, v, 1, 1 << 20, &x);
            a->heads = (long)x;
            i++;
        } else if (!strcmp(s, "--vocab-size")) {
            rc = parse_ll(s, v, 1, INT32_MAX, &x);
            a->vocab = (long)x;
            i++;
        } else if (!strcmp(s, "--keep-last")) {
            rc = parse_ll(s, v, 0, INT32_MAX, &x);
            a->keep_last = (long)x;
            a->have_keep_last = 1;
            i++;
        } else if (!strcmp(s, "--keep-every")) {
            rc = parse_ll(s, v, 0, INT32_MAX, &x);
            a->keep_every = (long)x;
            i++;
        } else if (!strcmp(s, "--json"))
            a->json = 1;
        else if (!strcmp(s, "--chunks"))
            a->chunks = 1;
        else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "llmtrain ckpt: unknown option '%s'\n", s);
            return CLI_USAGE;
        } else if (!a->sub)
            a->sub = s;
        else if (!a->dir)
            a->dir = s;
        else {
            fprintf(stderr, "llmtrain ckpt: unexpected argument '%s'\n", s);
            return CLI_USAGE;
        }
        if (rc != CLI_OK)
            return rc;
        if ((!strcmp(s, "--out") || !strcmp(s, "-o") || !strcmp(s, "--format") ||
             !strcmp(s, "--prefix")) && !v) {
            fprintf(stderr, "llmtrain ckpt: %s needs a value\n", s);
            return CLI_USAGE;
        }
    }
    if (!a->sub || !a->dir) {
        fprintf(stderr, "llmtrain ckpt: needs a subcommand and a directory "
                        "(llmtrain ckpt --help)\n");
        return CLI_USAGE;
    }
    return check_sub_flags(a);
}

static int is_step_dir(const char *dir)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    if (stat(p, &st) == 0)
        return 1;
    snprintf(p, sizeof p, "%s/rank-00000.json", dir);
    return stat(p, &st) == 0;
}

static llmt_ckpt *make(llmt_context *ctx, const char *root, const ck_args *a)
{
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    o.direct_io = 0;
    if (a && a->have_keep_last) {
        o.keep_last = (int32_t)a->keep_last;
        o.keep_every = (int32_t)a->keep_every;
    }
    llmt_ckpt *ck = NULL;
    llmt_status s = llmt_ckpt_create(ctx, root, &o, &ck);
    if (s != LLMT_OK) {
        cli_fail_status(CMD, s, llmt_context_last_error(ctx));
        return NULL;
    }
    return ck;
}

/* Open what DIR and --step name: a step directory, a given step, or the
 * newest complete one. Prints the reason on failure. */
static int step_dir_and_step(const ck_args *a)
{
    fprintf(stderr,
            "llmtrain ckpt %s: --step %lld: %s is one step directory already (give "
            "the checkpoint root to choose a step)\n",
            a->sub, a->step, a->dir);
    return CLI_USAGE;
}

static int open_target(llmt_ckpt *ck, const ck_args *a)
{
    llmt_status s;
    if (is_step_dir(a->dir) && a->step >= 0)
        return step_dir_and_step(a);
    if (is_step_dir(a->dir))
        s = llmt_ckpt_open_dir(ck, a->dir);
    else if (a->step >= 0)
        s = llmt_ckpt_open_step(ck, a->step);
    else
        s = llmt_ckpt_open_latest(ck, NULL);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, llmt_ckpt_last_error(ck));
    return CLI_OK;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* Every step-N directory of a root, committed or not, ascending. */
static long long *scan_steps(const char *root, size_t *n)
{
    *n = 0;
    DIR *d = opendir(root);
    if (!d)
        return NULL;
    size_t cap = 16;
    long long *v = malloc(cap * sizeof *v);
    struct dirent *e;
    while (v && (e = readdir(d))) {
        long long s;
        int used = 0;
        if (sscanf(e->d_name, "step-%12lld%n", &s, &used) != 1 || used != 17 ||
            e->d_name[used])
            continue;
        if (*n == cap) {
            long long *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv)
                break;
            v = nv;
            cap *= 2;
        }
        v[(*n)++] = s;
    }
    closedir(d);
    if (v)
        qsort(v, *n, sizeof *v, cmp_ll);
    return v;
}

static void human(char *b, size_t n, uint64_t x)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)x;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(b, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* Directories moved aside by resume or save (lib/ckpt/quarantine.c), each
 * with the reason recorded in its REASON file. */
static void list_quarantine(const char *root)
{
    char q[4200];
    snprintf(q, sizeof q, "%s/quarantine", root);
    DIR *d = opendir(q);
    if (!d)
        return;
    struct dirent *e;
    int first = 1;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "step-", 5))
            continue;
        if (first)
            printf("quarantined (unusable, kept for inspection; remove by hand when no "
                   "longer needed):\n");
        first = 0;
        char rp[4500], line[512], why[512] = "(no REASON file)";
        snprintf(rp, sizeof rp, "%s/%s/REASON", q, e->d_name);
        FILE *f = fopen(rp, "r");
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "reason: ", 8)) {
                line[strcspn(line, "\n")] = 0;
                snprintf(why, sizeof why, "%s", line + 8);
            }
        if (f)
            fclose(f);
        printf("  %s/%s: %s\n", q, e->d_name, why);
    }
    closedir(d);
}

/* ls and verify share the walk: every step directory, opened (and for
 * verify, fully hashed); the reason of each failure is printed. */
static int walk(llmt_context *ctx, const ck_args *a, int verify)
{
    if (is_step_dir(a->dir) && a->step >= 0)
        return step_dir_and_step(a);
    if (is_step_dir(a->dir)) {
        llmt_ckpt *ck = make(ctx, a->dir, NULL);
        if (!ck)
            return CLI_FAILED;
        llmt_status s = llmt_ckpt_open_dir(ck, a->dir);
        if (s == LLMT_OK && verify)
            s = llmt_ckpt_verify(ck);
        int64_t step = -1;
        llmt_ckpt_open_step_of(ck, &step);
        if (s == LLMT_OK)
            printf("%s: ok (step %lld)\n", a->dir, (long long)step);
        else
            printf("%s: BAD %s: %s\n", a->dir, llmt_status_string(s), llmt_ckpt_last_error(ck));
        llmt_ckpt_destroy(ck);
        return s == LLMT_OK ? CLI_OK : CLI_FAILED;
    }
    struct stat st;
    if (stat(a->dir, &st) || !S_ISDIR(st.st_mode))
        return cli_fail(CMD, "%s: not a directory", a->dir);
    llmt_ckpt *ck = make(ctx, a->dir, NULL);
    if (!ck)
        return CLI_FAILED;
    size_t n = 0;
    long long *v = scan_steps(a->dir, &n);
    int bad = 0;
    if (a->json)
        printf("[");
    else if (!verify)
        printf("%-14s %-6s %12s %8s  %s\n", "step", "ranks", "bytes", "tensors", "status");
    size_t shown = 0;
    for (size_t i = 0; v && i < n; i++) {
        if (a->step >= 0 && v[i] != a->step)
            continue;
        shown++;
        llmt_status s = llmt_ckpt_open_step(ck, v[i]);
        if (s == LLMT_OK && verify)
            s = llmt_ckpt_verify(ck);
        int32_t world = 0;
        uint64_t bytes = 0;
        size_t nt = 0;
        if (s == LLMT_OK) {
            llmt_ckpt_open_info(ck, &world, &bytes, NULL);
            llmt_ckpt_tensor_count(ck, &nt);
        }
        const char *why = s == LLMT_OK ? "" : llmt_ckpt_last_error(ck);
        int partial = s == LLMT_ERR_NOT_FOUND;
        /* an uncommitted directory (a crash mid-save) is not a checkpoint:
         * reported as such, it does not fail the committed ones */
        if (s != LLMT_OK && !partial)
            bad = 1;
        if (a->json) {
            printf("%s{\"step\":%lld,\"ok\":%s,\"world_size\":%d,\"bytes\":%llu,"
                   "\"tensors\":%zu,\"status\":\"%s\"}",
                   shown > 1 ? "," : "", v[i], s == LLMT_OK ? "true" : "false", (int)world,
                   (unsigned long long)bytes, nt,
                   s == LLMT_OK ? "ok"
                   : partial    ? "incomplete"
                                : llmt_status_string(s));
        } else if (verify) {
            if (s == LLMT_OK)
                printf("step %lld: ok (%zu tensors, every chunk hashed and covered)\n",
                       v[i], nt);
            else if (partial)
                printf("step %lld: incomplete (never committed: an interrupted save; "
                       "not a checkpoint, skipped)\n", v[i]);
            else
                printf("step %lld: BAD %s: %s\n", v[i], llmt_status_string(s), why);
        } else {
            char hb[32];
            human(hb, sizeof hb, bytes);
            printf("%-14lld %-6d %12s %8zu  %s%s%s\n", v[i], (int)world,
                   s == LLMT_OK ? hb : "-", nt,
                   s == LLMT_OK ? "ok" : partial ? "incomplete" : "BAD",
                   s == LLMT_OK ? "" : ": ", why);
        }
    }
    if (a->json)
        printf("]\n");
    if (verify && n == 0)
        printf("%s: no checkpoints\n", a->dir);
    if (a->step >= 0 && !shown) { /* an empty table would read as "nothing wrong" */
        free(v);
        llmt_ckpt_destroy(ck);
        return cli_fail(CMD, "--step %lld: no step directory of that step in %s", a->step,
                        a->dir);
    }
    if (!a->json)
        list_quarantine(a->dir);
    free(v);
    llmt_ckpt_destroy(ck);
    return bad ? CLI_FAILED : CLI_OK;
}

static void print_dims(const int64_t *d, int n)
{
    printf("[");
    for (int i = 0; i < n; i++)
        printf("%s%lld", i ? ", " : "", (long long)d[i]);
    printf("]");
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int inspect(llmt_context *ctx, const ck_args *a)
{
    llmt_ckpt *ck = make(ctx, a->dir, NULL);
    if (!ck)
        return CLI_FAILED;
    int rc = open_target(ck, a);
    if (rc != CLI_OK) {
        llmt_ckpt_destroy(ck);
        return rc;
    }
    int64_t step = -1;
    int32_t world = 0;
    uint64_t bytes = 0;
    size_t nkv = 0, nt = 0;
    llmt_ckpt_open_step_of(ck, &step);
    llmt_ckpt_open_info(ck, &world, &bytes, &nkv);
    llmt_ckpt_tensor_count(ck, &nt);
    size_t need = 0;
    llmt_ckpt_get_plan_json(ck, NULL, 0, &need);
    char *plan = malloc(need ? need : 1);
    if (plan)
        llmt_ckpt_get_plan_json(ck, plan, need, NULL);
    if (a->json)
        printf("{\"step\":%lld,\"world_size\":%d,\"bytes\":%llu,\"plan\":%s,\"kv\":{",
               (long long)step, (int)world, (unsigned long long)bytes, plan ? plan : "null");
    else
        printf("step %lld, saved by %d rank(s), %llu data bytes\nplan: %s\n",
               (long long)step, (int)world, (unsigned long long)bytes, plan ? plan : "null");
    free(plan);
    for (size_t i = 0; i < nkv; i++) {
        const char *k = NULL;
        llmt_ckpt_kv_key(ck, i, &k);
        size_t vn = 0;
        llmt_ckpt_get_kv(ck, k, NULL, 0, &vn);
        char *v = malloc(vn ? vn : 1);
        if (v && llmt_ckpt_get_kv(ck, k, v, vn, NULL) == LLMT_OK) {
            if (a->json) {
                printf("%s", i ? "," : "");
                json_str(k);
                printf(":");
                json_str(v);
            } else
                printf("kv %s = %s\n", k, v);
        }
        free(v);
    }
    if (a->json)
        printf("},\"tensors\":[");
    for (size_t i = 0; i < nt; i++) {
        const char *name = NULL;
        llmt_ckpt_tensor_name(ck, i, &name);
        llmt_dtype dt;
        int32_t nd = 0;
        int64_t g[LLMT_MAX_DIMS];
        size_t nc = 0;
        llmt_ckpt_tensor_info(ck, name, &dt, &nd, g, &nc);
        if (a->json) {
            printf("%s{\"name\":", i ? "," : "");
            json_str(name);
            printf(",\"dtype\":\"%s\",\"shape\":", llmt_dtype_name(dt));
            print_dims(g, nd);
            printf(",\"chunks\":[");
        } else {
            printf("%-40s %-5s ", name, llmt_dtype_name(dt));
            print_dims(g, nd);
            printf("  %zu chunk(s)\n", nc);
        }
        for (size_t c = 0; c < nc && (a->chunks || a->json); c++) {
            int32_t r = 0;
            int64_t off[LLMT_MAX_DIMS], shp[LLMT_MAX_DIMS];
            uint64_t b = 0;
            llmt_ckpt_chunk_info(ck, name, c, &r, off, shp, &b);
            if (a->json) {
                printf("%s{\"rank\":%d,\"offsets\":", c ? "," : "", (int)r);
                print_dims(off, nd);
                printf(",\"shape\":");
                print_dims(shp, nd);
                printf(",\"bytes\":%llu}", (unsigned long long)b);
            } else {
                printf("    rank %-5d at ", (int)r);
                print_dims(off, nd);
                printf(" shape ");
                print_dims(shp, nd);
                printf(" %llu bytes\n", (unsigned long long)b);
            }
        }
        if (a->json)
            printf("]}");
    }
    if (a->json)
        printf("]}\n");
    llmt_ckpt_destroy(ck);
    return CLI_OK;
}

static int export_cmd(llmt_context *ctx, const ck_args *a)
{
    if (!a->out)
        return cli_fail(CMD, "export needs --out FILE"), CLI_USAGE;
    int llmc = !strcmp(a->format, "llmc");
    if (!llmc && strcmp(a->format, "safetensors"))
        return cli_fail(CMD, "--format must be safetensors or llmc, got '%s'", a->format),
               CLI_USAGE;
    llmt_ckpt *ck = make(ctx, a->dir, NULL);
    if (!ck)
        return CLI_FAILED;
    int rc = open_target(ck, a);
    if (rc == CLI_OK) {
        llmt_status s;
        if (llmc) {
            llmt_ckpt_llmc_opts o;
            llmt_ckpt_llmc_opts_init(&o, sizeof o);
            o.prefix = a->prefix;
            o.heads = (int32_t)a->heads;
            o.vocab_size = (int32_t)a->vocab;
            s = llmt_ckpt_export_llmc(ck, a->out, &o);
        } else
            s = llmt_ckpt_export_safetensors(ck, a->out);
        if (s != LLMT_OK)
            rc = cli_fail_status(CMD, s, llmt_ckpt_last_error(ck));
        else {
            int64_t step = -1;
            llmt_ckpt_open_step_of(ck, &step);
            printf("wrote %s (%s, step %lld)\n", a->out, a->format, (long long)step);
        }
    }
    llmt_ckpt_destroy(ck);
    return rc;
}

static int prune(llmt_context *ctx, const ck_args *a)
{
    if (!a->have_keep_last)
        return cli_fail(CMD, "prune needs --keep-last K (0 keeps all) [--keep-every N]"),
               CLI_USAGE;
    /* keep-last 0 keeps every step: a --keep-every beside it would keep
     * nothing more (lib/ckpt/save.c, retain) */
    if (a->keep_last == 0 && a->keep_every > 0)
        return cli_fail(CMD,
                        "prune: --keep-every %ld has no effect with --keep-last 0, which "
                        "keeps every step; give --keep-last K > 0 (the newest K kept "
                        "besides every N-th step), or leave --keep-every out",
                        a->keep_every),
               CLI_USAGE;
    if (is_step_dir(a->dir))
        return cli_fail(CMD, "prune works on a checkpoint root, %s is one step", a->dir);
    llmt_ckpt *ck = make(ctx, a->dir, a);
    if (!ck)
        return CLI_FAILED;
    size_t removed = 0;
    llmt_status s = llmt_ckpt_prune(ck, &removed);
    llmt_ckpt_destroy(ck);
    if (s != LLMT_OK)
        return cli_fail(CMD, "prune failed: %s", llmt_status_string(s));
    printf("removed %zu checkpoint director%s\n", removed, removed == 1 ? "y" : "ies");
    return CLI_OK;
}

static void log_sink(void *user, llmt_log_level level, const char *module, const char *msg)
{
    (void)user;
    fprintf(stderr, "llmtrain ckpt: [%s %s] %s\n",
            level >= LLMT_LOG_ERROR ? "error" : level >= LLMT_LOG_WARN ? "warn" : "info",
            module, msg);
}

int cmd_ckpt(int argc, char **argv)
{
    ck_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    llmt_context_opts co;
    llmt_context_opts_init(&co, sizeof co);
    co.log_fn = log_sink;
    /* ls and verify print every reason themselves */
    co.log_level = !strcmp(a.sub, "ls") || !strcmp(a.sub, "verify") ? LLMT_LOG_ERROR
                                                                    : LLMT_LOG_WARN;
    llmt_context *ctx = NULL;
    llmt_status s = llmt_context_create(&co, &ctx);
    if (s != LLMT_OK)
        return cli_fail_status(CMD, s, "cannot create a context");
    if (!strcmp(a.sub, "ls"))
        rc = walk(ctx, &a, 0);
    else if (!strcmp(a.sub, "verify"))
        rc = walk(ctx, &a, 1);
    else if (!strcmp(a.sub, "inspect"))
        rc = inspect(ctx, &a);
    else if (!strcmp(a.sub, "export"))
        rc = export_cmd(ctx, &a);
    else if (!strcmp(a.sub, "prune"))
        rc = prune(ctx, &a);
    else {
        fprintf(stderr, "llmtrain ckpt: unknown subcommand '%s' (ls, verify, inspect, "
                        "export, prune)\n", a.sub);
        rc = CLI_USAGE;
    }
    llmt_context_destroy(ctx);
    return rc;
}
