#!/usr/bin/env bash
# Builds FlashFFTConv (HazyResearch/flash-fft-conv, not on PyPI), the fftconv benchmark's second peer, on the GPU
# machine, and exports the PYTHONPATH under which `from flashfftconv import FlashFFTConv` works.
# Usage: source tools/device/flashfftconv.sh SRC   (SRC, e.g. .peers/flashfftconv_src: a git-ignored folder holding the
# repository's csrc/flashfftconv and flashfftconv/ folders; see docs/fftconv.md, "Measuring")
# Its setup.py asks for C++17 and compute_80 PTX; the sources build as they are for C++20 and sm_90a, which is what
# this changes, in a copy under /tmp. Logs under $OUT.
src=$(realpath "${1:?name the folder holding csrc/flashfftconv and flashfftconv/}")
build=/tmp/flashfftconv_build
start=$(date +%s)
rm -rf "$build" && cp -r "$src/csrc/flashfftconv" "$build"
sed -i 's/-std=c++17/-std=c++20/; s/--generate-code=arch=compute_80,code=compute_80/-gencode=arch=compute_90a,code=sm_90a/' \
    "$build/setup.py"
if (cd "$build" && MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build_ext --inplace > "${OUT:-/tmp}/flashfftconv_build.log" 2>&1); then
    export PYTHONPATH="$build:$src${PYTHONPATH:+:$PYTHONPATH}"
    echo "FlashFFTConv built in $(( $(date +%s) - start )) s"
else
    echo "FlashFFTConv did not build (${OUT:-/tmp}/flashfftconv_build.log):"; grep -m 10 -i "error" "${OUT:-/tmp}/flashfftconv_build.log"
fi
