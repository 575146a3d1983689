#!/usr/bin/env bash
# Runs a dslide job with its ranks on simulated nodes joined by a shaped link, using the
# netns-cluster tool (needs root). Usage:
#   launch/run/netns-run.sh P RATE PROGRAM ARGS...      e.g. launch/run/netns-run.sh 2 1gbit ./build/dslide train ...
# NETNS_CLUSTER points at the tool (default ../shared/tools/netns-cluster/netns-cluster).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ $(id -u) -ne 0 ]]; then
  echo "netns-run: simulated nodes need root (network namespaces); not running" >&2
  exit 2
fi
tool=${NETNS_CLUSTER:-../shared/tools/netns-cluster/netns-cluster}
if [[ ! -x $tool ]]; then
  echo "netns-run: netns-cluster not found at $tool (set NETNS_CLUSTER)" >&2
  exit 2
fi
np=$1 rate=$2
shift 2
threads=$(( $(nproc) / np > 0 ? $(nproc) / np : 1 ))
trap '"$tool" down >/dev/null 2>&1 || true' EXIT
"$tool" up "$np" --rate "$rate"
OMP_NUM_THREADS=$threads "$tool" mpirun -np "$np" -x OMP_NUM_THREADS "$@"
