"""The shared trainer image: preflight, the train loop, checkpoints, the NCCL log report, launch."""
