#!/usr/bin/env bash
# Configures and builds dslide into build/. Every project option is stated on each call (the
# defaults below, then the caller's arguments, which win), so an option that one script cached
# in build/ (the demo's -DDSLIDE_BUILD_TESTS=OFF, a -DDSLIDE_CUDA=ON) never silently changes
# what the next script builds. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSLIDE_CUDA=AUTO -DDSLIDE_NATIVE=ON \
  -DDSLIDE_WERROR=OFF -DDSLIDE_BUILD_TESTS=ON -DDSLIDE_FUZZ=OFF "$@"
cmake --build build -j "$(nproc)"
