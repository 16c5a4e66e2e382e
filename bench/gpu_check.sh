#!/usr/bin/env bash
# The trainer's GPU path on one machine with one NVIDIA GPU, end to end, in about two and a half minutes:
#
#   bench/gpu_check.sh [OUT_DIR] [PYTHON]      (defaults: ./gpu-check, python3)
#
# 1. what the machine has (GPU, driver, torch, CUDA, NCCL) and `trainer preflight` on it;
# 2. `trainer train` under torchrun with NCCL on the GPU, bf16 autocast, DDP then FSDP2, with the
#    transport check on (TRAINYARD_EXPECT_TRANSPORT=Socket) and NCCL's own log kept;
# 3. pod loss: kill -9 of torchrun and its worker after step 100 of 400 is committed, then the same command
#    resumes (params_sha256 printed beside an uninterrupted run's);
# 4. `trainer nccl-report` over the NCCL logs those runs wrote;
# 5. bench/trainer_gpu.py (gpt-125m, sync vs async checkpoints), table in OUT_DIR/trainer_cuda.md.
#
# Each step's output goes to OUT_DIR/check.log; a failing step is reported and the next one runs.
# DEVICE=cpu runs the same steps on the CPU (gloo; no transport check) to try the script itself.
set -u
OUT=${1:-gpu-check}
PY=${2:-python3}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
LOG=$OUT/check.log
: >"$LOG"
failed=0

step() {
    local name=$1
    shift
    echo "=== $name: $*" | tee -a "$LOG"
    local t0=$SECONDS
    if "$@" >>"$LOG" 2>&1; then
        echo "--- $name: ok ($((SECONDS - t0)) s)" | tee -a "$LOG"
    else
        echo "--- $name: FAILED, exit $? ($((SECONDS - t0)) s)" | tee -a "$LOG"
        failed=$((failed + 1))
    fi
}

TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc-per-node 1 -m trainer train --device "$DEVICE")
train() {
    "${TORCHRUN[@]}" "$@"
}

# Pod loss: run the training command and kill -9 torchrun and its workers (started in sessions of
# their own, so found by the checkpoint folder in their command lines) once step $2 is committed.
kill_when_committed() {
    local metrics=$1 at=$2
    shift 2
    "$@" &
    local pid=$! i
    for i in $(seq 1500); do
        grep -q "\"event\": \"committed\", \"step\": $at," "$metrics" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    pkill -9 -f -- "--checkpoint-dir $(dirname "$metrics")"
    wait "$pid"
    [ $? -eq 137 ]  # killed, not finished
}

if [ "$DEVICE" = cuda ]; then
    step machine nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    mkdir -p "$OUT/nccl"
    export TRAINYARD_EXPECT_TRANSPORT=Socket NCCL_DEBUG_FILE=$OUT/nccl/nccl.%h.%p.log
else
    export CUDA_VISIBLE_DEVICES=
fi
step versions "$PY" -c 'import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
step preflight "$PY" -m trainer preflight --gpus "$([ "$DEVICE" = cuda ] && echo 1 || echo 0)"

RUNS=$(mktemp -d)
step train-ddp train --model gpt-125m --strategy ddp --max-steps 20 --batch-size 8 --seq-len 256 \
    --checkpoint-dir "$RUNS/ddp" --checkpoint-every 10 --log-every 5
step train-fsdp train --model gpt-125m --strategy fsdp --max-steps 20 --batch-size 8 --seq-len 256 \
    --checkpoint-dir "$RUNS/fsdp" --checkpoint-every 10 --log-every 5
TINY=(--model tiny --max-steps 400 --batch-size 8 --checkpoint-every 100 --log-every 100)
step pod-loss kill_when_committed "$RUNS/resume/metrics.jsonl" 100 "${TORCHRUN[@]}" "${TINY[@]}" --checkpoint-dir "$RUNS/resume"
step resume train "${TINY[@]}" --checkpoint-dir "$RUNS/resume"
step resumed grep -q '"event": "resume"' "$RUNS/resume/metrics.jsonl"
step uninterrupted train "${TINY[@]}" --checkpoint-dir "$RUNS/straight"
echo "params_sha256 after pod loss and resume, then uninterrupted (equal where the GPU kernels are deterministic):" >>"$LOG"
grep -ho '"params_sha256": "[0-9a-f]*"' "$RUNS/resume/metrics.jsonl" "$RUNS/straight/metrics.jsonl" >>"$LOG"
if [ "$DEVICE" = cuda ]; then
    step nccl-report "$PY" -m trainer nccl-report "$OUT"/nccl/nccl.*.log
fi
rm -rf "$RUNS"
step bench "$PY" bench/trainer_gpu.py --device "$DEVICE" --json --table "$OUT/trainer_$DEVICE.md" \
    $([ "$DEVICE" = cpu ] && echo --model tiny --steps 12 --checkpoint-every 4)
if [ -d "$OUT/nccl" ]; then  # one file for all the NCCL logs
    tar -C "$OUT" -czf "$OUT/nccl-logs.tgz" nccl && rm -r "$OUT/nccl"
fi
echo "$failed step(s) failed" | tee -a "$LOG"
exit $((failed > 0))
