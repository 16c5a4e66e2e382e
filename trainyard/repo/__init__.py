"""Floor 2, the repository tooling: render, pins, validate, preview, new-job and generate, with the
emulations of kustomize's caller (Argo CD), of the Kubeflow controllers and of kube-apiserver's
admission they need. Imports the contract and the webhook (the same engine and policies the
cluster runs); never the sandbox.

Its rooms, bottom to top; an import points down, or sideways within its room:

- ``model``: the repository as data: its folders, kustomize builds, rendered objects, the facts a
  cluster declares and renders, problems; the upstream releases it pins (``releases``), their Go
  modules and their offline render with kustomize and Helm (``upstream``);
- ``upstream``: offline emulations of upstream controllers (Argo CD, Kubeflow Trainer, JobSet,
  Kueue, the v1 Training Operator, strategic merge) and of kube-apiserver's
  admission (CEL, ValidatingAdmissionPolicies and their bindings, RBAC);
- ``generate``: compilers from the fabric profiles and the declared facts to the manifests kept in
  git (runtimes, pod security, MutatingAdmissionPolicies, Kueue queues), and ``trainyard generate``;
- ``jobs``: what a job folder becomes and whether it fits (preview, trainer arguments, placement)
  and ``trainyard new-job``;
- ``validate``: ``trainyard validate``, every check a pull request must pass;
- ``cli``, ``render`` and ``pins``: the thin commands on top.
"""
