"""Floor 0, the fabric contract: what the webhook, the trainer, the repository tooling and the
sandbox agree on. Standard library only, so both images carry it.

- :mod:`~trainyard.contract.names`: every env name, label, annotation and volume name on a pod;
- :mod:`~trainyard.contract.errors`: the error types, exit statuses and the command runner;
- :mod:`~trainyard.contract.nccl`: NCCL variable knowledge and the lint behind it;
- :mod:`~trainyard.contract.k8s`: Kubernetes name patterns and ``$(VAR)`` expansion;
- :mod:`~trainyard.contract.images`, :mod:`~trainyard.contract.quantity`,
  :mod:`~trainyard.contract.networks`: parsers of image references, quantities and the Multus
  networks annotation;
- :mod:`~trainyard.contract.reports`: the run log and preflight results the trainer writes;
- :mod:`~trainyard.contract.argv`: splitting a command line at ``--``.
"""
