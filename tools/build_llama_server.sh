#!/usr/bin/env bash
# Build llama.cpp's llama-server (one static binary) into OUTPUT_DIR.
#
# llama-server is not on PyPI. Its sources are: the llama-cpp-python sdist vendors llama.cpp,
# so this downloads that sdist from PyPI (the version the `server` extra installs, or
# $LLAMA_CPP_PYTHON_VERSION), and builds only the server target, without the web UI (which
# would be fetched from the network) and without HTTPS. About 5 minutes on 2 cores.
#
#   bash tools/build_llama_server.sh .llama-server
#   export TEXTGYM_LLAMA_SERVER=$PWD/.llama-server/llama-server
set -euo pipefail
out="${1:?usage: build_llama_server.sh OUTPUT_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
version="${LLAMA_CPP_PYTHON_VERSION:-$(python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || true)}"
if [ -z "$version" ]; then
    echo "build_llama_server.sh: install the server extra first, or set LLAMA_CPP_PYTHON_VERSION" >&2
    exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
# shellcheck disable=SC2046  # the flags are meant to split into words
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    $(bash "$here/llama_cpp_cpu_flags.sh") \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF > "$work/cmake.log" 2>&1 \
    || { tail -n 40 "$work/cmake.log" >&2; exit 1; }
# The compiler's warnings about llama.cpp's own code go to the log; its tail is shown on failure.
cmake --build "$work/build" --target llama-server -j "$(nproc)" > "$work/build.log" 2>&1 \
    || { tail -n 40 "$work/build.log" >&2; exit 1; }
mkdir -p "$out"
cp "$work/build/bin/llama-server" "$out/llama-server"
echo "llama-server (llama-cpp-python $version's llama.cpp) built: $out/llama-server"
