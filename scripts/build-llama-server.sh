#!/usr/bin/env bash
# Builds llama.cpp's C++ `llama-server` (continuous batching, `--parallel N` slots) from the
# llama.cpp sources that the llama-cpp-python 0.3.36 source distribution carries under vendor/,
# into ~/.cache/rlx/llama-server-0.3.36/ (override with RLX_LLAMA_SERVER_DIR). Prints the binary's
# path. Needs python3 (pip fetches the sdist, cmake and ninja) and a C++ compiler; no GPU.
# Used by benches/openai.rs; about 10 minutes on 2 cores, once.
set -euo pipefail
VERSION=0.3.36
DIR=${RLX_LLAMA_SERVER_DIR:-$HOME/.cache/rlx/llama-server-$VERSION}
BIN=$DIR/build/bin/llama-server
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$DIR"
exec 9>"$DIR.lock"
flock 9
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
if [ ! -x "$DIR/tools/bin/cmake" ]; then
  python3 -m venv "$DIR/tools" >&2
  "$DIR/tools/bin/pip" install --disable-pip-version-check -q cmake==3.31.6 ninja==1.11.1.4 >&2
fi
if [ ! -d "$DIR/src/vendor/llama.cpp/tools/server" ]; then
  rm -rf "$DIR/src" "$DIR/sdist" && mkdir -p "$DIR/sdist" "$DIR/src"
  python3 -m pip download --no-deps --no-binary llama-cpp-python -q -d "$DIR/sdist" "llama-cpp-python==$VERSION" >&2
  tar xzf "$DIR"/sdist/llama_cpp_python-$VERSION.tar.gz -C "$DIR/src" --strip-components=1
fi
export PATH="$DIR/tools/bin:$PATH"
cmake -S "$DIR/src/vendor/llama.cpp" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON >&2
cmake --build "$DIR/build" --target llama-server -j "$(nproc)" >&2
echo "$BIN"
