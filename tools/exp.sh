set -o pipefail
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
for p in 4,1 5,1; do TCGEMM_SM90_PLAN=$p timeout 60 python3 tools/smoke_gemm.py sm90 > $OUT/smoke_$p.log 2>&1; echo "smoke $p rc=$? $(grep -c ok $OUT/smoke_$p.log)"; done
S="1x8192x8192 16x8192x8192 64x8192x8192 128x8192x8192 16x28672x8192 1x4096x4096 64x4096x14336"
for plan in 3,1 4,1 2,1 5,1 3,1 4,1; do echo "plan=$plan"; TCGEMM_SM90_PLAN=$plan python3 tools/time_gemm.py sm90 $S; done
