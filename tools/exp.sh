set -o pipefail
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
S="128x8192x8192 256x8192x8192 64x8192x8192 32x8192x8192 16x8192x8192 1x8192x8192"
for t in auto 0 1 2 3; do echo "tile=$t"; TCGEMM_SM90_TILE=$t python3 tools/time_gemm.py sm90,sm80 $S; done
