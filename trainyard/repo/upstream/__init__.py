"""Offline emulations of what runs upstream, each following its source at a pinned release: Argo CD
(argocd; its ApplicationSet controller: appset, with Go templates: gotemplate), Kubeflow Trainer
(trainjob), JobSet (jobset), Kueue's admission (kueue), the v1 Training Operator
(training_operator), kustomize's strategic merge (strategic_merge), and kube-apiserver's admission:
CEL (cel_runtime), ValidatingAdmissionPolicy evaluation (vap), policy and binding matching
(matching), the ValidatingAdmissionPolicies a cluster binds (bindings) and the RBAC authorizer
(rbac). Imports only the model."""
