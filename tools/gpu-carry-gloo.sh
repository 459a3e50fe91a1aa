#!/usr/bin/env bash
# Adds Gloo (and the libraries it links) to .devdeps/ after
# /work/shared/device/prep-carry.sh made it: the GPU machine's image has
# no Gloo, and without it `llmtrain launch` (whose workers rendezvous
# through a Gloo store) and the tests of jobs across processes on a GPU
# (gpu-job-tp) skip there. .devdeps/env.sh unpacks every .deb it holds.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)/.devdeps"
apt-get download -qq libgloo0 libgloo-dev libhiredis0.14 libibverbs1 libnl-3-200 \
  libnl-route-3-200
ls ./*.deb | wc -l
