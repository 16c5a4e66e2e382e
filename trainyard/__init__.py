"""trainyard: repo tooling and the single ``trainyard`` command line."""

__version__ = "0.1.0"
