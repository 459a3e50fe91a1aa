#!/bin/sh
# usage: run-mpi.sh NP PROGRAM [ARGS...]  (exit 77 = SKIP without mpirun)
np=$1; shift
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skip"; exit 77; }
# Containers often forbid the cross-memory-attach single copy of vader.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
xs=""
for v in LLMT_FAULT_SKIP_COLLECTIVE LLMT_COMM_TIMEOUT_MS LLMT_COMM_DUMP_PATH LLMT_LOG_LEVEL; do
  eval "set_=\${$v+x}"
  [ -n "$set_" ] && xs="$xs -x $v"
done
exec mpirun -np "$np" --oversubscribe --allow-run-as-root $xs "$@"
