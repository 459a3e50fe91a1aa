#!/usr/bin/env python3
"""Generate the nullargs test's calls from include/llmtrain.h.

Every exported function is called, from the header as it is (so a new
function is covered the day it is added):
  1. with every pointer NULL and every number 0 (a NULL handle first);
  2. on a valid handle, with each other pointer argument NULL in turn and
     the rest pointing to zeroed scratch memory (a zero struct_size, an
     empty string, an array of NULL strings);
  3. on a valid handle, with each enum argument out of range.
None may crash (the test runs under ASan/UBSan in CI). Pass 1 must fail
with a NULL handle; pass 2 must fail unless the header documents that
argument as optional (OPTIONAL below), and then name the argument in the
handle's message. Usage: gen_nullargs.py llmtrain.h out.c
"""
import re
import sys

# handle type -> the C variable test_nullargs.c's prelude makes
HANDLES = {
    'llmt_context': 'h_ctx', 'llmt_spec': 'h_spec', 'llmt_plan': 'h_plan',
    'llmt_model': 'h_model', 'llmt_trainer': 'h_tr', 'llmt_ckpt': 'h_ck',
    'llmt_comm': 'h_comm', 'llmt_tokenizer': 'h_tok', 'llmt_ingest': 'h_ing',
    'llmt_dedup': 'h_dd', 'llmt_shard_writer': 'h_sw', 'llmt_dataset': 'h_ds',
    'llmt_loader': 'h_ld',
}
LAST_ERROR = {
    'llmt_context': 'llmt_context_last_error', 'llmt_spec': 'llmt_spec_last_error',
    'llmt_plan': 'llmt_plan_last_error', 'llmt_model': 'llmt_model_last_error',
    'llmt_trainer': 'llmt_trainer_last_error', 'llmt_ckpt': 'llmt_ckpt_last_error',
    'llmt_comm': 'llmt_comm_last_error', 'llmt_tokenizer': 'llmt_tokenizer_last_error',
    'llmt_ingest': 'llmt_ingest_last_error', 'llmt_dedup': 'llmt_dedup_last_error',
    'llmt_shard_writer': 'llmt_shard_writer_last_error',
    'llmt_dataset': 'llmt_dataset_last_error', 'llmt_loader': 'llmt_loader_last_error',
}
ENUMS = {'llmt_log_level', 'llmt_dtype', 'llmt_device_type', 'llmt_type_id',
         'llmt_plan_dim', 'llmt_reduce_op', 'llmt_comm_backend', 'llmt_status'}
# Arguments the header documents as optional ("may be NULL", "NULL:
# defaults", NULL detaches ...): NULL there is a valid call.
OPTIONAL = {
    ('llmt_context_create', 'opts'), ('llmt_plan_auto', 'opts'),
    ('llmt_plan_simulate_goodput', 'opts'), ('llmt_model_param', 'name'),
    ('llmt_trainer_step', 'metrics'), ('llmt_ckpt_create', 'opts'),
    ('llmt_ckpt_create', 'ctx'), ('llmt_ckpt_add_tensor', 'global_shape'),
    ('llmt_ckpt_add_tensor', 'global_offsets'), ('llmt_ckpt_save_status', 'step'),
    ('llmt_ckpt_open_snapshot', 'step'), ('llmt_ckpt_peer_restore', 'restored'),
    ('llmt_ckpt_export_llmc', 'opts'), ('llmt_comm_create_inproc', 'opts'),
    ('llmt_comm_create_from_env', 'opts'), ('llmt_comm_create_from_mpi', 'opts'),
    ('llmt_comm_create_from_unique_id', 'opts'),
    ('llmt_comm_create_from_store', 'opts'), ('llmt_trainer_set_comm', 'comm'),
    ('llmt_trainer_set_comm', 'opts'), ('llmt_trainer_set_tp_comm', 'comm'),
    ('llmt_trainer_set_pp_comm', 'comm'), ('llmt_trainer_set_pp_comm', 'opts'),
    ('llmt_trainer_set_cp_comm', 'comm'), ('llmt_trainer_set_cp_comm', 'opts'),
    ('llmt_trainer_set_ep_comm', 'comm'), ('llmt_ingest_open', 'opts'),
    ('llmt_dedup_add', 'similar'), ('llmt_dedup_create', 'opts'),
    ('llmt_loader_next', 'sample_ids'), ('llmt_loader_create', 'opts'),
    ('llmt_loader_assign_shards', 'ids'), ('llmt_data_prepare', 'opts'),
    ('llmt_data_prepare', 'report'), ('llmt_data_normalize', 'invalid'),
    ('llmt_data_synth_markov', 'buf'), ('llmt_data_synth_markov', 'entropy_rate'),
    ('llmt_trainer_moe_stats', 'counts'), ('llmt_trainer_moe_stats', 'dropped'),
    ('llmt_trainer_moe_stats', 'aux_loss'), ('llmt_trainer_moe_stats', 'z_loss'),
    ('llmt_trainer_optim_shard', 'flat_offset'), ('llmt_plan_group', 'group_id'),
    ('llmt_plan_group', 'ranks'), ('llmt_ckpt_list', 'steps'),
    ('llmt_ckpt_tensor_info', 'dtype'), ('llmt_ckpt_tensor_info', 'ndim'),
    ('llmt_ckpt_tensor_info', 'global_shape'), ('llmt_ckpt_tensor_info', 'nchunks'),
    ('llmt_ckpt_open_info', 'world_size'), ('llmt_ckpt_open_info', 'data_bytes'),
    ('llmt_ckpt_open_info', 'nkv'), ('llmt_ckpt_chunk_info', 'rank'),
    ('llmt_ckpt_chunk_info', 'global_offsets'), ('llmt_ckpt_chunk_info', 'local_shape'),
    ('llmt_ckpt_chunk_info', 'bytes'), ('llmt_ckpt_prune', 'removed'),
    ('llmt_ckpt_quarantine_newer', 'moved'), ('llmt_model_param_count', 'count'),
    ('llmt_model_param_count', 'numel'), ('llmt_shard_writer_count', 'tokens'),
    ('llmt_shard_writer_count', 'documents'), ('llmt_dataset_shard', 'path'),
    ('llmt_dataset_shard', 'tokens'), ('llmt_dataset_shard', 'documents'),
    ('llmt_tensor_init', 'data'), ('llmt_tensor_init', 'shape'),
    ('llmt_trainer_ckpt_add', 'ck'), ('llmt_log', 'module'),
    # size queries: NULL buffer (or NULL needed) is a documented call
    ('llmt_tokenizer_encode', 'ids'), ('llmt_tokenizer_decode', 'buf'),
    ('llmt_tokenizer_token_bytes', 'buf'), ('llmt_plan_explain', 'needed'),
    ('llmt_plan_to_json', 'needed'), ('llmt_spec_to_json', 'needed'),
    ('llmt_spec_validate_json', 'needed'), ('llmt_spec_validate_json', 'buf'),
    ('llmt_spec_get_string', 'needed'), ('llmt_ckpt_get_kv', 'needed'),
    ('llmt_ckpt_get_plan_json', 'needed'), ('llmt_comm_recorder_dump', 'needed'),
}
# Buffers with a size query: NULL with capacity 0 is the query, so the
# pass-2 call (capacity 1) must refuse it; these are listed to make the
# generated call pass capacity 1 (the default for size_t) - nothing to do.
# Never called on a valid handle: they block, end the handle, free memory
# or need a peer (their NULL-handle call still runs).
SKIP_VALID = {
    'llmt_context_destroy', 'llmt_free', 'llmt_comm_abort', 'llmt_comm_finalize',
    'llmt_comm_recv', 'llmt_comm_send', 'llmt_comm_barrier', 'llmt_comm_work_test',
    'llmt_comm_work_wait', 'llmt_comm_work_free', 'llmt_ckpt_wait',
    'llmt_ckpt_peer_replicate', 'llmt_ckpt_peer_restore', 'llmt_comm_create_from_mpi',
    'llmt_comm_create_from_store', 'llmt_comm_create_from_unique_id',
    'llmt_shard_writer_finish', 'llmt_trainer_set_comm', 'llmt_trainer_set_tp_comm',
    'llmt_trainer_set_pp_comm', 'llmt_trainer_set_cp_comm', 'llmt_trainer_set_ep_comm',
}
# Calls that crash today in a module this test's owners do not edit:
# skipped (named on stderr) until the module's owner fixes them.
KNOWN_CRASH = {}
# Numbers that must be 0 to be in range for a valid handle of one rank.
ZERO_INTS = {'rank', 'peer', 'root', 'index', 'dp_rank', 'color', 'key', 'stage',
             'chunk', 'layer', 'async', 'verify', 'daly', 'which', 'epoch'}
# Pointers that stay NULL on a valid call (no valid non-NULL value here).
ALWAYS_NULL = {'stream', 'mpi_comm'}


def protos(path):
    src = open(path).read()
    src = re.sub(r'/\*.*?\*/', '', src, flags=re.S)
    src = re.sub(r'#[^\n]*', '', src)
    for m in re.finditer(r'LLMT_API\s+([^;()]*?)\b(llmt_\w+)\s*\(([^;]*?)\)\s*;', src, re.S):
        ret = ' '.join(m.group(1).split())
        params = ' '.join(m.group(3).split())
        ps = [] if params in ('void', '') else [p.strip() for p in params.split(',')]
        args = []
        for p in ps:
            mm = re.match(r'(.*?)(\w+)$', p)
            args.append((' '.join(mm.group(1).split()), mm.group(2)))
        yield ret, m.group(2), args


def base(ctype):
    return re.sub(r'\b(const|struct)\b', '', ctype).replace('*', '').strip()


def is_ptr(ctype):
    return '*' in ctype or ctype.endswith('_fn')


def handle_of(ctype):
    """The handle type of a `llmt_X *` argument (one star), else None."""
    if ctype.count('*') != 1:
        return None
    b = base(ctype)
    return b if b in HANDLES else None


def num_value(ctype, name, enum_bad):
    b = base(ctype)
    if b in ENUMS:
        return '(%s)%s' % (b, '12345' if enum_bad else '0')
    if name in ZERO_INTS:
        return '0'
    if name in ('timeout_ms',):
        return '1'
    if b in ('float', 'double'):
        return '1.0'
    return '1'


def call_expr(name, args, values):
    return '%s(%s)' % (name, ', '.join(values))


def pass1(fns):
    out = ['void nullargs_pass1(void)', '{']
    for ret, name, args in fns:
        vals = []
        for t, n in args:
            vals.append('NULL' if is_ptr(t) else ('(%s)0' % base(t)))
        c = call_expr(name, args, vals)
        first_handle = args and handle_of(args[0][0])
        if ret == 'llmt_status' and first_handle:
            out.append('    expect_fail("%s", %s);' % (name, c))
        elif ret == 'void':
            out.append('    %s;' % c)
        elif ret == 'int':  # a predicate: false without its arguments
            out.append('    expect_zero("%s(NULL...)", %s);' % (name, c))
        else:
            out.append('    (void)%s;' % c)
    out.append('}')
    return out


def pass2(fns):
    out = ['void nullargs_pass2(void)', '{']
    for ret, name, args in fns:
        if name in SKIP_VALID or not args or not handle_of(args[0][0]):
            continue
        h0 = handle_of(args[0][0])
        for i, (t, n) in enumerate(args[1:], 1):
            if not is_ptr(t) or n in ALWAYS_NULL:
                continue
            vals = [HANDLES[h0]]
            for j, (tj, nj) in enumerate(args[1:], 1):
                if j == i or nj in ALWAYS_NULL:
                    vals.append('NULL')
                elif handle_of(tj):
                    vals.append(HANDLES[handle_of(tj)])
                elif is_ptr(tj):
                    vals.append('(%s)scratch()' % tj if not tj.endswith('_fn') else 'NULL')
                else:
                    vals.append(num_value(tj, nj, False))
            c = call_expr(name, args, vals)
            if (name, n) in KNOWN_CRASH:
                out.append('    fprintf(stderr, "  skipped %s(%s NULL): %s\\n");' %
                           (name, n, KNOWN_CRASH[(name, n)]))
                continue
            opt = 1 if (name, n) in OPTIONAL else 0
            if ret == 'int':  # a predicate (llmt_spec_is_given): false
                out.append('    expect_zero("%s(%s NULL)", %s);' % (name, n, c))
                continue
            if ret != 'llmt_status':
                out.append('    (void)%s;' % c)
                continue
            out.append('    {')
            out.append('        llmt_status s_ = %s;' % c)
            out.append('        expect_null("%s", "%s", %d, s_, %s(%s));' %
                       (name, n, opt, LAST_ERROR[h0], HANDLES[h0]))
            out.append('    }')
    out.append('}')
    return out


def pass3(fns):
    out = ['void nullargs_pass3(void)', '{']
    for ret, name, args in fns:
        for i, (t, n) in enumerate(args):
            if base(t) not in ENUMS or is_ptr(t) or ret != 'llmt_status':
                continue
            if name in SKIP_VALID:
                continue
            vals = []
            for j, (tj, nj) in enumerate(args):
                if handle_of(tj):
                    vals.append(HANDLES[handle_of(tj)])
                elif nj in ALWAYS_NULL or tj.endswith('_fn'):
                    vals.append('NULL')
                elif is_ptr(tj):
                    vals.append('(%s)scratch()' % tj)
                else:
                    vals.append(num_value(tj, nj, j == i))
            out.append('    expect_fail("%s(%s out of range)", %s);' %
                       (name, n, call_expr(name, args, vals)))
    out.append('}')
    return out


def main():
    fns = list(protos(sys.argv[1]))
    lines = ['/* Generated by gen_nullargs.py from include/llmtrain.h: do not edit. */',
             '#include "nullargs_prelude.h"', '']
    lines += pass1(fns) + [''] + pass2(fns) + [''] + pass3(fns) + ['']
    lines.append('int nullargs_functions = %d;' % len(fns))
    open(sys.argv[2], 'w').write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
