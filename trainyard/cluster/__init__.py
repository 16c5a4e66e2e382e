"""Floor 3, the local control plane: Kubernetes built from its Go modules (``kube/``), run on
loopback, with a cluster's rendered repository synced into it as Argo CD would.

Imports the contract, the webhook (its certificates and server) and the repository tooling (what
a cluster renders); never the sandbox.
"""
