#!/usr/bin/env bash
# Print the CMake flags that build llama.cpp (ggml) for this CPU's vector extensions.
#
# llama.cpp's default build is native (-march=native) and turns on AMX where the CPU has it; on
# the CI machine (Xeon with AMX) such a build segfaults as soon as a prompt is processed in
# batches (n_ubatch > 1). So: not native, each extension the CPU reports named explicitly, and
# never AMX. Used by .ci/run (the llama-cpp-python build) and build_llama_server.sh.
set -euo pipefail
flags="-DGGML_NATIVE=OFF"
for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C avx512f:AVX512 avx512_vnni:AVX512_VNNI \
    avx512_bf16:AVX512_BF16 avx512vbmi:AVX512_VBMI; do
    if grep -qw "${pair%%:*}" /proc/cpuinfo 2>/dev/null; then
        flags+=" -DGGML_${pair##*:}=ON"
    fi
done
echo "$flags"
