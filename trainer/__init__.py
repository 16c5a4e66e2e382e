"""The shared trainer image: preflight, the train loop, checkpoints, the NCCL log report, launch."""

import time

# When this process began running trainer code (``python -m trainer`` imports this first, before
# torch): the run log's start event reports it, so that a restart can be split into its phases.
PROCESS_STARTED = time.time()
