"""``python -m trainer train ...``: how torchrun starts each rank."""

import sys

from trainer.cli import main

sys.exit(main())
