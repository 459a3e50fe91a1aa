/* MPI communicators (run under mpirun): the collective matrix of
 * coll_check.h on the world communicator from the launcher's environment,
 * and on a communicator made from the host's MPI_Comm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_check.h"
#include "llmtrain.h"

int main(int argc, char **argv)
{
    int big = argc > 1 && !strcmp(argv[1], "--big");
    if (!(llmt_build_features() & LLMT_FEATURE_MPI)) {
        fprintf(stderr, "no MPI in this build\n");
        return 77;
    }
    llmt_comm_opts o;
    llmt_comm_opts_init(&o, sizeof o);
    o.timeout_ms = 60000;
    llmt_comm *c = NULL;
    llmt_status s = llmt_comm_create_from_env(NULL, &o, &c);
    if (s != LLMT_OK) {
        fprintf(stderr, "create_from_env: %s\n", llmt_status_string(s));
        return 1;
    }
    cc_state st;
    memset(&st, 0, sizeof st);
    int32_t r, n;
    llmt_comm_rank(c, &r);
    llmt_comm_size(c, &n);
    st.rank = r;
    st.size = n;
    llmt_comm_backend be;
    llmt_comm_backend_of(c, &be);
    st.checks++;
    if (n > 1 && be != LLMT_COMM_MPI) CC_FAIL(&st, "backend %d, want MPI", (int)be);
    cc_run_all(&st, c, big);
    /* a second communicator (its own sequence numbers) over the same world */
    llmt_comm *c2 = NULL;
    snprintf(st.where, sizeof st.where, "second communicator");
    cc_status(&st, c, llmt_comm_create_from_env(NULL, &o, &c2));
    if (c2) {
        uint64_t seq = 0;
        llmt_comm_next_seq(c2, &seq);
        st.checks++;
        if (seq != 1) CC_FAIL(&st, "new comm next_seq %llu", (unsigned long long)seq);
        cc_status(&st, c2, llmt_comm_finalize(c2));
        llmt_comm_destroy(c2);
    }
    cc_status(&st, c, llmt_comm_finalize(c));
    llmt_comm_destroy(c);
    fprintf(stderr, "rank %d of %d: %d checks, %d failed\n", r, n, st.checks,
            st.fails);
    return st.fails ? 1 : 0;
}
