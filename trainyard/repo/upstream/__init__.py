"""Offline emulations of what runs upstream, each following its source at a pinned release, for
what this repository uses: Argo CD (the offline render of Applications: app_render, over the
objects in applications; its ApplicationSet controller: appset; the sync order: syncorder; the diff
fields it checks: argo_fields; Go's path.Match for literal text and '*': go_path; health checks:
health), Kubeflow Trainer (trainjob), JobSet (jobset), Kueue's admission (kueue), the v1 Training
Operator (training_operator), kustomize's strategic merge (strategic_merge), and kube-apiserver's
admission: CEL (cel_runtime), ValidatingAdmissionPolicy evaluation (vap), policy and binding
matching (matching), the ValidatingAdmissionPolicies a cluster binds (bindings) and the RBAC
authorizer (rbac). Imports only the model."""
