#!/usr/bin/env bash
# What a session with a CUDA device runs there, in one go (docs/results.md (h)):
#   1. the environment (GPU, driver, Python, torch, numpy, commit);
#   2. the tests that need CUDA (-m gpu: the torch module on CUDA against the
#      interpreter, the conformance suite's torch-cuda runtime, crasp check --device cuda);
#   3. tokens per second of the torch module on CUDA beside torch on that machine's CPU;
#   4. a sweep on the GPU (benchmarks/grids/chomsky_rest.toml, device "auto" = CUDA) for
#      SWEEP_SECONDS, then interrupted (Ctrl-C): finished runs keep their records, and the
#      same command resumes the rest anywhere.
# Usage: CRASP_SOURCE_COMMIT=<the commit sent> benchmarks/gpu_session.sh OUTDIR [SWEEP_SECONDS [WORKERS]]
# (the machine's copy of the tree may carry a stale .git: records name the commit given)
# OUTDIR receives gpu_tests.xml, throughput_cuda.json and chomsky_rest.tgz (the records).
set -u
OUT=${1:?usage: benchmarks/gpu_session.sh OUTDIR [SWEEP_SECONDS [WORKERS]]}
SWEEP_SECONDS=${2:-300}
WORKERS=${3:-14}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PYTORCH_NVML_BASED_CUDA_CHECK=1  # is_available() in a sweep's parent leaves CUDA alone
step() { echo "== $* ($(date -u +%H:%M:%S))"; }

step environment
nvidia-smi -L 2>&1 | head -4
python3 -c "import sys, numpy, torch; print(sys.version.split()[0], 'numpy', numpy.__version__,
'torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown), changed files: $(git status --porcelain 2>/dev/null | wc -l)"
nproc

step "tests that need CUDA"
python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --junitxml "$OUT/gpu_tests.xml" \
    tests/runtime/test_conformance.py tests/runtime/test_torch.py tests/cli/test_cli_check.py 2>&1 | tail -8

step "throughput: torch on CUDA and on this machine's CPU"
python3 benchmarks/throughput.py --runtimes torch-cpu torch-cuda --lengths 1000 10000 100000 \
    --batches 1 32 --max-seconds 1 --repeats 5 --out "$OUT/throughput_cuda.json" 2>/dev/null
python3 benchmarks/throughput.py --markdown "$OUT/throughput_cuda.json" | grep -E "dyck1|majority" | head -8

step "sweep on the GPU for ${SWEEP_SECONDS} s with ${WORKERS} workers"
timeout -s INT "$SWEEP_SECONDS" python3 -c "from crasp_compiler.cli import main; main()" \
    sweep benchmarks/grids/chomsky_rest.toml --workers "$WORKERS" --no-bar 2>&1 | tail -40
tar czf "$OUT/chomsky_rest.tgz" -C docs/results/length-generalization chomsky_rest 2>/dev/null
step done
