#!/bin/sh
# Julia: the smoke test and the job test of bindings-template/julia when
# `julia` is on PATH; SKIP (77) otherwise (Julia is not in Debian 12).
# usage: run-julia.sh SOURCE_ROOT LIBLLMTRAIN LLMTRAIN_EXE
src="$1"; export LLMT_LIB="$2"; exe="$3"
command -v julia >/dev/null 2>&1 || { echo "julia not found: SKIP"; exit 77; }
julia "$src/bindings-template/julia/smoke_test.jl" || exit 1
exec julia --threads 2 "$src/bindings-template/julia/job_test.jl" "$src" "$exe"
