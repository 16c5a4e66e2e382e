"""Compilers from the fabric profiles and a cluster's facts to the manifests kept in git: the
ClusterTrainingRuntimes (runtimes), the job namespaces' pod security policy (pod_security), the
MutatingAdmissionPolicies (mutating_policy, run and compared with the engine by mutating_harness),
each cluster's Kueue queues (queues), and ``trainyard generate`` that writes them all (files).
Imports the model and the upstream emulations."""
