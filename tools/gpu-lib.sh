# shellcheck shell=bash disable=SC2154
# Sourced by the GPU machine scripts (tools/gpu-session.sh, gpu-tune.sh).
# They set log (the summary file), budget (seconds) and steps (the folder
# of each step's output) before calling these.

# say TEXT: the elapsed seconds and TEXT into the summary (and stdout)
say() { echo "[$SECONDS s] $*" | tee -a "$log"; }

# run STEP SECONDS CMD...: CMD under a timeout of SECONDS or what is left
# of the budget if less (skipped under 15 s), its output in
# $steps/STEP.log, its status and last line in the summary
run() {
  local name=$1 want=$2 t=$((budget - SECONDS))
  shift 2
  [ "$t" -gt "$want" ] && t=$want
  if [ "$t" -lt 15 ]; then say "$name: skipped (budget spent)"; return 99; fi
  timeout -k 5 "$t" "$@" </dev/null >"$steps/$name.log" 2>&1
  local rc=$?
  say "$name: rc $rc ($(tail -1 "$steps/$name.log" | cut -c1-160))"
  return $rc
}

# gpu_build_setup BUILD_DIR LOG SETUP_LOG
# puts the carried packages (.devdeps/env.sh unpacks them under
# /tmp/devroot) and nvcc on the paths, then configures BUILD_DIR for sm_90
# (release) unless it is configured already; non-zero when meson fails.
# meson's header and library checks do not see CPATH/LIBRARY_PATH under
# /tmp/devroot, and Debian's Gloo lives in /usr/lib, not the multiarch
# folder: both are named.
gpu_build_setup() {
  gb_dir=$1 gb_log=$2 gb_setup=$3
  [ -f .devdeps/env.sh ] && . .devdeps/env.sh >>"$gb_log" 2>&1
  export PATH="/usr/local/cuda/bin:$PATH"
  gb_dr=/tmp/devroot/usr
  set --
  if [ -d $gb_dr/include ]; then
    export LD_LIBRARY_PATH="$gb_dr/lib:${LD_LIBRARY_PATH:-}"
    set -- -Dc_args=-I$gb_dr/include -Dcpp_args=-I$gb_dr/include \
      "-Dc_link_args=-L$gb_dr/lib -L$gb_dr/lib/x86_64-linux-gnu" \
      "-Dcpp_link_args=-L$gb_dr/lib -L$gb_dr/lib/x86_64-linux-gnu"
  fi
  [ -f "$gb_dir/build.ninja" ] && return 0
  meson setup "$gb_dir" -Dgpu_arch="arch=compute_90,code=sm_90" -Dbuildtype=release "$@" \
    >"$gb_setup" 2>&1
}
