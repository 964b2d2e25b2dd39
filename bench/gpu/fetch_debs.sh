#!/bin/sh
# bench/gpu/fetch_debs.sh: download (here, on the Debian machine) the Debian
# packages that the GPU check's build needs and the GPU machine lacks, into
# .gpu-debs/ (ignored by git; the device tool's `carry` takes it there).
# cJSON, and zlib1g-dev (its static libz.a, for ampc-gpu's dataset files): the
# check's build (bench/gpu/CMakeLists.txt) needs nothing else
# outside the CUDA toolkit, the C compiler and OpenMP.
set -eu
cd "$(dirname "$0")/../.."
mkdir -p .gpu-debs
cd .gpu-debs
apt-get download libcjson1 libcjson-dev zlib1g-dev
ls -l
