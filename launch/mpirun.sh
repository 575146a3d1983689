#!/usr/bin/env bash
# mpirun with the flags dslide wants for one rank per node and OpenMP threads inside it:
# ranks mapped by node, not bound to one core (OpenMP threads need the node's cores),
# OMP_NUM_THREADS exported (default: cores per node / ranks per node), and root allowed.
# Usage: launch/mpirun.sh -np P [--hostfile FILE] PROGRAM ARGS...
set -euo pipefail
np=1
args=()
while (($#)); do
  case "$1" in
    -np|-n) np="$2"; args+=("$1" "$2"); shift 2 ;;
    *) break ;;
  esac
done
hostfile_args=()
if [[ -n "${HOSTFILE:-}" ]]; then hostfile_args=(--hostfile "$HOSTFILE" --map-by ppr:1:node); fi
if [[ -z "${OMP_NUM_THREADS:-}" ]]; then
  cores=$(nproc)
  if [[ -n "${HOSTFILE:-}" ]]; then OMP_NUM_THREADS=$cores; else OMP_NUM_THREADS=$(( cores / np > 0 ? cores / np : 1 )); fi
fi
export OMP_NUM_THREADS
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
exec mpirun "${args[@]}" "${hostfile_args[@]}" --bind-to none --oversubscribe "${root[@]}" \
  -x OMP_NUM_THREADS "$@"
