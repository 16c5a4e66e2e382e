"""Floor 2, the repository tooling: render, validate, preview and new-job, with the emulations of
kustomize's caller (Argo CD) and of the Kubeflow controllers they need. Imports the contract and
the webhook (the same engine and policies the cluster runs); never the sandbox."""
