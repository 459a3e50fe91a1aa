#!/bin/sh
# usage: run_reshard_mpi.sh RUN_MPI_SH PROGRAM  (8 ranks, a fresh directory)
run=$1
prog=$2
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skip"; exit 77; }
d=$(mktemp -d "${TMPDIR:-/tmp}/llmt-reshard-mpi-XXXXXX")
sh "$run" 8 "$prog" "$d"
rc=$?
rm -rf "$d"
exit $rc
