#!/usr/bin/env bash
# Download, on a machine with network, the wheels the GPU machine lacks into .whl/ (git-ignored), for
# `python bench/gpu_session.py --out $OUT`, which installs them there without network (bench/README,
# docs/gpu-session.md).
#
#     bench/gpu_wheels.sh [--python 3.12] [--dest .whl]
#
# The GPU machine's image has PyTorch, Triton, cuda-bindings, NumPy, ml_dtypes and pytest. Downloaded:
# - Tessera's dependencies (pyproject.toml [project] dependencies) other than those: xDSL with its own
#   dependencies, threadpoolctl;
# - setuptools as pyproject.toml's [build-system] requires it: pip builds the editable install of this checkout
#   in an isolated environment, offline, from these wheels;
# - nvidia-cuda-nvcc-cu12 (ptxas 12.x, pyproject.toml's `test` extra): the session compiles every kernel to a
#   cubin in parallel on the GPU machine's CPUs (without it the runtime would hand PTX to the driver's JIT);
# - pytest-xdist and execnet: the session's GPU tests run on several workers.
# Binary wheels only, for CPython --python on manylinux x86_64; the total must stay under 64 MiB (what the
# device machine's `carry` takes), else this exits 1. .whl/MANIFEST.json records the Python version, the
# requirements and every file with its size; the session checks the running Python against it.
# .whl/fidelity/ (the fidelity table's PTX-executor side, `python bench/gpu_session.py --prepare`) is kept:
# run that after this script, and again after any change to the kernels.
set -euo pipefail
cd "$(dirname "$0")/.."

python_version=3.12
dest=.whl
while [ $# -gt 0 ]; do
    case "$1" in
        --python) python_version="$2"; shift 2 ;;
        --dest) dest="$2"; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "gpu_wheels.sh: unknown argument '$1' (usage: bench/gpu_wheels.sh [--python 3.12] [--dest .whl])" >&2
           exit 2 ;;
    esac
done
if ! [[ "$python_version" =~ ^3\.[0-9]+$ ]]; then
    echo "gpu_wheels.sh: --python takes a CPython version such as 3.12, got '$python_version'" >&2
    exit 2
fi

python=python3
# The requirements, from pyproject.toml (bench/gpu_session.py keeps the one list of what the image has).
mapfile -t requirements < <("$python" bench/gpu_session.py --wheel-requirements)

rm -f "$dest"/*.whl "$dest/MANIFEST.json"  # not fidelity/: `gpu_session.py --prepare` made it
mkdir -p "$dest"
"$python" -m pip download --only-binary=:all: --python-version "$python_version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux2010_x86_64 --platform manylinux_2_12_x86_64 \
    -d "$dest" "${requirements[@]}"

"$python" bench/gpu_session.py --write-wheel-manifest "$dest" --python "$python_version" "${requirements[@]}"
