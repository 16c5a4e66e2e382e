"""trainyard: the fabric contract (floor 0), the repository tooling (floor 2), the local sandbox
(floor 3) and the single ``trainyard`` command line on top. The webhook and the trainer (floor 1)
are the top-level packages ``webhook`` and ``trainer``."""

__version__ = "0.1.0"
