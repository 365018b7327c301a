#!/usr/bin/env bash
# Build llama.cpp's `llama-server` for the benchmarks (latency's documents part, editors): the same llama.cpp
# that llama-cpp-python vendors, so that the peer and our engine run identical kernels. A
# CPU build, benchmark-only (not part of `make test`): about 6 minutes on a two-core CPU.
#
#   bench/build_llama_server.sh OUT_DIR [LLAMA_CPP_PYTHON_VERSION]   ->  OUT_DIR/bin/llama-server
set -euo pipefail
out=${1:?usage: bench/build_llama_server.sh OUT_DIR [LLAMA_CPP_PYTHON_VERSION]}
version=${2:-0.3.36}
python=${PYTHON:-python3}
if [ -x "$out/bin/llama-server" ]; then
    echo "$out/bin/llama-server (already built)"
    exit 0
fi
command -v cmake >/dev/null || { echo "cmake is needed: apt-get install cmake" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The source distribution: llama-cpp-python has no wheel to take instead.
"$python" -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$version" --dest "$scratch"
tar -xzf "$scratch/llama_cpp_python-$version.tar.gz" -C "$scratch"
source_dir="$scratch/llama_cpp_python-$version/vendor/llama.cpp"
# GGML_NATIVE=OFF as for our own build (Makefile), statically linked so the binary moves freely.
cmake -S "$source_dir" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$scratch/build" --target llama-server -j"$(nproc)" >&2
mkdir -p "$out/bin"
cp "$scratch/build/bin/llama-server" "$out/bin/"
echo "$out/bin/llama-server"
