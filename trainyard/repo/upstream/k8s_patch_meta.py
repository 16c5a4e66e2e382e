"""Kubernetes API type facts that Argo CD's diff takes from the Go types it is built with, extracted
from k8s.io/api@v0.36.1 (the version argo-cd@v3.5.1:go.mod pins) and
k8s.io/client-go@v0.36.1:kubernetes/scheme/register.go.

- ``SCHEME``: the group/versions of client-go's scheme, each with its k8s.io/api package and kinds.
  gitops-engine treats a kind in it as a registered scheme (argo-cd@v3.5.1:gitops-engine/pkg/diff/
  diff.go remarshal, threeWayMergePatch): it is re-marshalled through its Go type and diffed with a
  strategic merge patch; any other kind (every custom resource, and apiextensions and apiregistration
  objects) with a JSON merge patch.
- ``TYPES``, by Go type (``package.Type``; a kind's type is its package and kind name): for the
  strategic merge patch, each list field whose struct tag says ``patchStrategy:"merge"`` with its
  ``patchMergeKey`` (merged item by item on that key; any other list is replaced whole); for the
  re-marshal, each list field whose json tag lacks ``omitempty`` (flag ``L``: Go marshals it even
  empty or null; an ``omitempty`` one is dropped) and each map field (flag ``M``: its keys are kept
  whatever their values). ``TYPES[type][field] = (type of the field's value or items where more such
  fields lie below, merge key, flags)``; fields that lead to none of these are left out.

Generated from the Go sources; do not edit by hand.
"""

from __future__ import annotations

SCHEME: dict[str, tuple[str, frozenset[str]]] = {
    "/v1": (
        "core/v1",
        frozenset(
            (
                "Binding",
                "ComponentStatus",
                "ConfigMap",
                "Endpoints",
                "Event",
                "LimitRange",
                "Namespace",
                "Node",
                "NodeProxyOptions",
                "PersistentVolume",
                "PersistentVolumeClaim",
                "Pod",
                "PodAttachOptions",
                "PodExecOptions",
                "PodLogOptions",
                "PodPortForwardOptions",
                "PodProxyOptions",
                "PodStatusResult",
                "PodTemplate",
                "RangeAllocation",
                "ReplicationController",
                "ResourceQuota",
                "Secret",
                "SerializedReference",
                "Service",
                "ServiceAccount",
                "ServiceProxyOptions",
            )
        ),
    ),
    "admissionregistration.k8s.io/v1": (
        "admissionregistration/v1",
        frozenset(
            (
                "MutatingAdmissionPolicy",
                "MutatingAdmissionPolicyBinding",
                "MutatingWebhookConfiguration",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
                "ValidatingWebhookConfiguration",
            )
        ),
    ),
    "admissionregistration.k8s.io/v1alpha1": (
        "admissionregistration/v1alpha1",
        frozenset(
            (
                "MutatingAdmissionPolicy",
                "MutatingAdmissionPolicyBinding",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
            )
        ),
    ),
    "admissionregistration.k8s.io/v1beta1": (
        "admissionregistration/v1beta1",
        frozenset(
            (
                "MutatingAdmissionPolicy",
                "MutatingAdmissionPolicyBinding",
                "MutatingWebhookConfiguration",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
                "ValidatingWebhookConfiguration",
            )
        ),
    ),
    "apps/v1": ("apps/v1", frozenset(("ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"))),
    "apps/v1beta1": (
        "apps/v1beta1",
        frozenset(("ControllerRevision", "Deployment", "DeploymentRollback", "Scale", "StatefulSet")),
    ),
    "apps/v1beta2": (
        "apps/v1beta2",
        frozenset(("ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "Scale", "StatefulSet")),
    ),
    "authentication.k8s.io/v1": ("authentication/v1", frozenset(("SelfSubjectReview", "TokenRequest", "TokenReview"))),
    "authentication.k8s.io/v1alpha1": ("authentication/v1alpha1", frozenset(("SelfSubjectReview",))),
    "authentication.k8s.io/v1beta1": ("authentication/v1beta1", frozenset(("SelfSubjectReview", "TokenReview"))),
    "authorization.k8s.io/v1": (
        "authorization/v1",
        frozenset(
            ("LocalSubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview")
        ),
    ),
    "authorization.k8s.io/v1beta1": (
        "authorization/v1beta1",
        frozenset(
            ("LocalSubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview")
        ),
    ),
    "autoscaling/v1": ("autoscaling/v1", frozenset(("HorizontalPodAutoscaler", "Scale"))),
    "autoscaling/v2": ("autoscaling/v2", frozenset(("HorizontalPodAutoscaler",))),
    "batch/v1": ("batch/v1", frozenset(("CronJob", "Job"))),
    "batch/v1beta1": ("batch/v1beta1", frozenset(("CronJob",))),
    "certificates.k8s.io/v1": ("certificates/v1", frozenset(("CertificateSigningRequest",))),
    "certificates.k8s.io/v1alpha1": ("certificates/v1alpha1", frozenset(("ClusterTrustBundle",))),
    "certificates.k8s.io/v1beta1": (
        "certificates/v1beta1",
        frozenset(("CertificateSigningRequest", "ClusterTrustBundle", "PodCertificateRequest")),
    ),
    "coordination.k8s.io/v1": ("coordination/v1", frozenset(("Lease",))),
    "coordination.k8s.io/v1alpha2": ("coordination/v1alpha2", frozenset(("LeaseCandidate",))),
    "coordination.k8s.io/v1beta1": ("coordination/v1beta1", frozenset(("Lease", "LeaseCandidate"))),
    "discovery.k8s.io/v1": ("discovery/v1", frozenset(("EndpointSlice",))),
    "discovery.k8s.io/v1beta1": ("discovery/v1beta1", frozenset(("EndpointSlice",))),
    "events.k8s.io/v1": ("events/v1", frozenset(("Event",))),
    "events.k8s.io/v1beta1": ("events/v1beta1", frozenset(("Event",))),
    "extensions/v1beta1": (
        "extensions/v1beta1",
        frozenset(("DaemonSet", "Deployment", "DeploymentRollback", "Ingress", "NetworkPolicy", "ReplicaSet", "Scale")),
    ),
    "flowcontrol.apiserver.k8s.io/v1": ("flowcontrol/v1", frozenset(("FlowSchema", "PriorityLevelConfiguration"))),
    "flowcontrol.apiserver.k8s.io/v1beta1": (
        "flowcontrol/v1beta1",
        frozenset(("FlowSchema", "PriorityLevelConfiguration")),
    ),
    "flowcontrol.apiserver.k8s.io/v1beta2": (
        "flowcontrol/v1beta2",
        frozenset(("FlowSchema", "PriorityLevelConfiguration")),
    ),
    "flowcontrol.apiserver.k8s.io/v1beta3": (
        "flowcontrol/v1beta3",
        frozenset(("FlowSchema", "PriorityLevelConfiguration")),
    ),
    "internal.apiserver.k8s.io/v1alpha1": ("apiserverinternal/v1alpha1", frozenset(("StorageVersion",))),
    "networking.k8s.io/v1": (
        "networking/v1",
        frozenset(("IPAddress", "Ingress", "IngressClass", "NetworkPolicy", "ServiceCIDR")),
    ),
    "networking.k8s.io/v1beta1": (
        "networking/v1beta1",
        frozenset(("IPAddress", "Ingress", "IngressClass", "ServiceCIDR")),
    ),
    "node.k8s.io/v1": ("node/v1", frozenset(("RuntimeClass",))),
    "node.k8s.io/v1alpha1": ("node/v1alpha1", frozenset(("RuntimeClass",))),
    "node.k8s.io/v1beta1": ("node/v1beta1", frozenset(("RuntimeClass",))),
    "policy/v1": ("policy/v1", frozenset(("Eviction", "PodDisruptionBudget"))),
    "policy/v1beta1": ("policy/v1beta1", frozenset(("Eviction", "PodDisruptionBudget"))),
    "rbac.authorization.k8s.io/v1": (
        "rbac/v1",
        frozenset(("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")),
    ),
    "rbac.authorization.k8s.io/v1alpha1": (
        "rbac/v1alpha1",
        frozenset(("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")),
    ),
    "rbac.authorization.k8s.io/v1beta1": (
        "rbac/v1beta1",
        frozenset(("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")),
    ),
    "resource.k8s.io/v1": (
        "resource/v1",
        frozenset(("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")),
    ),
    "resource.k8s.io/v1alpha3": ("resource/v1alpha3", frozenset(("DeviceTaintRule", "ResourcePoolStatusRequest"))),
    "resource.k8s.io/v1beta1": (
        "resource/v1beta1",
        frozenset(("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")),
    ),
    "resource.k8s.io/v1beta2": (
        "resource/v1beta2",
        frozenset(("DeviceClass", "DeviceTaintRule", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")),
    ),
    "scheduling.k8s.io/v1": ("scheduling/v1", frozenset(("PriorityClass",))),
    "scheduling.k8s.io/v1alpha2": ("scheduling/v1alpha2", frozenset(("PodGroup", "Workload"))),
    "scheduling.k8s.io/v1beta1": ("scheduling/v1beta1", frozenset(("PriorityClass",))),
    "storage.k8s.io/v1": (
        "storage/v1",
        frozenset(
            ("CSIDriver", "CSINode", "CSIStorageCapacity", "StorageClass", "VolumeAttachment", "VolumeAttributesClass")
        ),
    ),
    "storage.k8s.io/v1alpha1": (
        "storage/v1alpha1",
        frozenset(("CSIStorageCapacity", "VolumeAttachment", "VolumeAttributesClass")),
    ),
    "storage.k8s.io/v1beta1": (
        "storage/v1beta1",
        frozenset(
            ("CSIDriver", "CSINode", "CSIStorageCapacity", "StorageClass", "VolumeAttachment", "VolumeAttributesClass")
        ),
    ),
    "storagemigration.k8s.io/v1beta1": ("storagemigration/v1beta1", frozenset(("StorageVersionMigration",))),
}

TYPES: dict[str, dict[str, tuple[str | None, str | None, str]]] = {
    "admissionregistration/v1.MutatingAdmissionPolicy": {
        "spec": ("admissionregistration/v1.MutatingAdmissionPolicySpec", None, "")
    },
    "admissionregistration/v1.MutatingAdmissionPolicySpec": {"matchConditions": (None, "name", "")},
    "admissionregistration/v1.MutatingWebhook": {
        "admissionReviewVersions": (None, None, "L"),
        "matchConditions": (None, "name", ""),
    },
    "admissionregistration/v1.MutatingWebhookConfiguration": {
        "webhooks": ("admissionregistration/v1.MutatingWebhook", "name", "")
    },
    "admissionregistration/v1.ValidatingAdmissionPolicy": {
        "spec": ("admissionregistration/v1.ValidatingAdmissionPolicySpec", None, "")
    },
    "admissionregistration/v1.ValidatingAdmissionPolicySpec": {
        "matchConditions": (None, "name", ""),
        "variables": (None, "name", ""),
    },
    "admissionregistration/v1.ValidatingWebhook": {
        "admissionReviewVersions": (None, None, "L"),
        "matchConditions": (None, "name", ""),
    },
    "admissionregistration/v1.ValidatingWebhookConfiguration": {
        "webhooks": ("admissionregistration/v1.ValidatingWebhook", "name", "")
    },
    "admissionregistration/v1alpha1.MutatingAdmissionPolicy": {
        "spec": ("admissionregistration/v1alpha1.MutatingAdmissionPolicySpec", None, "")
    },
    "admissionregistration/v1alpha1.MutatingAdmissionPolicySpec": {"matchConditions": (None, "name", "")},
    "admissionregistration/v1alpha1.ValidatingAdmissionPolicy": {
        "spec": ("admissionregistration/v1alpha1.ValidatingAdmissionPolicySpec", None, "")
    },
    "admissionregistration/v1alpha1.ValidatingAdmissionPolicySpec": {
        "matchConditions": (None, "name", ""),
        "variables": (None, "name", ""),
    },
    "admissionregistration/v1beta1.MutatingAdmissionPolicy": {
        "spec": ("admissionregistration/v1beta1.MutatingAdmissionPolicySpec", None, "")
    },
    "admissionregistration/v1beta1.MutatingAdmissionPolicySpec": {"matchConditions": (None, "name", "")},
    "admissionregistration/v1beta1.MutatingWebhook": {"matchConditions": (None, "name", "")},
    "admissionregistration/v1beta1.MutatingWebhookConfiguration": {
        "webhooks": ("admissionregistration/v1beta1.MutatingWebhook", "name", "")
    },
    "admissionregistration/v1beta1.ValidatingAdmissionPolicy": {
        "spec": ("admissionregistration/v1beta1.ValidatingAdmissionPolicySpec", None, "")
    },
    "admissionregistration/v1beta1.ValidatingAdmissionPolicySpec": {
        "matchConditions": (None, "name", ""),
        "variables": (None, "name", ""),
    },
    "admissionregistration/v1beta1.ValidatingWebhook": {"matchConditions": (None, "name", "")},
    "admissionregistration/v1beta1.ValidatingWebhookConfiguration": {
        "webhooks": ("admissionregistration/v1beta1.ValidatingWebhook", "name", "")
    },
    "apps/v1.DaemonSet": {"spec": ("apps/v1.DaemonSetSpec", None, ""), "status": ("apps/v1.DaemonSetStatus", None, "")},
    "apps/v1.DaemonSetSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "apps/v1.DaemonSetStatus": {"conditions": (None, "type", "")},
    "apps/v1.Deployment": {
        "spec": ("apps/v1.DeploymentSpec", None, ""),
        "status": ("apps/v1.DeploymentStatus", None, ""),
    },
    "apps/v1.DeploymentSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "apps/v1.DeploymentStatus": {"conditions": (None, "type", "")},
    "apps/v1.ReplicaSet": {
        "spec": ("apps/v1.ReplicaSetSpec", None, ""),
        "status": ("apps/v1.ReplicaSetStatus", None, ""),
    },
    "apps/v1.ReplicaSetSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "apps/v1.ReplicaSetStatus": {"conditions": (None, "type", "")},
    "apps/v1.StatefulSet": {
        "spec": ("apps/v1.StatefulSetSpec", None, ""),
        "status": ("apps/v1.StatefulSetStatus", None, ""),
    },
    "apps/v1.StatefulSetSpec": {
        "template": ("core/v1.PodTemplateSpec", None, ""),
        "volumeClaimTemplates": ("core/v1.PersistentVolumeClaim", None, ""),
    },
    "apps/v1.StatefulSetStatus": {"conditions": (None, "type", "")},
    "apps/v1beta1.Deployment": {
        "spec": ("apps/v1beta1.DeploymentSpec", None, ""),
        "status": ("apps/v1beta1.DeploymentStatus", None, ""),
    },
    "apps/v1beta1.DeploymentRollback": {"updatedAnnotations": (None, None, "M")},
    "apps/v1beta1.DeploymentSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "apps/v1beta1.DeploymentStatus": {"conditions": (None, "type", "")},
    "apps/v1beta1.Scale": {"status": ("apps/v1beta1.ScaleStatus", None, "")},
    "apps/v1beta1.ScaleStatus": {"selector": (None, None, "M")},
    "apps/v1beta1.StatefulSet": {
        "spec": ("apps/v1beta1.StatefulSetSpec", None, ""),
        "status": ("apps/v1beta1.StatefulSetStatus", None, ""),
    },
    "apps/v1beta1.StatefulSetSpec": {
        "template": ("core/v1.PodTemplateSpec", None, ""),
        "volumeClaimTemplates": ("core/v1.PersistentVolumeClaim", None, ""),
    },
    "apps/v1beta1.StatefulSetStatus": {"conditions": (None, "type", "")},
    "apps/v1beta2.DaemonSet": {
        "spec": ("apps/v1beta2.DaemonSetSpec", None, ""),
        "status": ("apps/v1beta2.DaemonSetStatus", None, ""),
    },
    "apps/v1beta2.DaemonSetSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "apps/v1beta2.DaemonSetStatus": {"conditions": (None, "type", "")},
    "apps/v1beta2.Deployment": {
        "spec": ("apps/v1beta2.DeploymentSpec", None, ""),
        "status": ("apps/v1beta2.DeploymentStatus", None, ""),
    },
    "apps/v1beta2.DeploymentSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "apps/v1beta2.DeploymentStatus": {"conditions": (None, "type", "")},
    "apps/v1beta2.ReplicaSet": {
        "spec": ("apps/v1beta2.ReplicaSetSpec", None, ""),
        "status": ("apps/v1beta2.ReplicaSetStatus", None, ""),
    },
    "apps/v1beta2.ReplicaSetSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "apps/v1beta2.ReplicaSetStatus": {"conditions": (None, "type", "")},
    "apps/v1beta2.Scale": {"status": ("apps/v1beta2.ScaleStatus", None, "")},
    "apps/v1beta2.ScaleStatus": {"selector": (None, None, "M")},
    "apps/v1beta2.StatefulSet": {
        "spec": ("apps/v1beta2.StatefulSetSpec", None, ""),
        "status": ("apps/v1beta2.StatefulSetStatus", None, ""),
    },
    "apps/v1beta2.StatefulSetSpec": {
        "template": ("core/v1.PodTemplateSpec", None, ""),
        "volumeClaimTemplates": ("core/v1.PersistentVolumeClaim", None, ""),
    },
    "apps/v1beta2.StatefulSetStatus": {"conditions": (None, "type", "")},
    "authentication/v1.SelfSubjectReview": {"status": ("authentication/v1.SelfSubjectReviewStatus", None, "")},
    "authentication/v1.SelfSubjectReviewStatus": {"userInfo": ("authentication/v1.UserInfo", None, "")},
    "authentication/v1.TokenRequest": {"spec": ("authentication/v1.TokenRequestSpec", None, "")},
    "authentication/v1.TokenRequestSpec": {"audiences": (None, None, "L")},
    "authentication/v1.TokenReview": {"status": ("authentication/v1.TokenReviewStatus", None, "")},
    "authentication/v1.TokenReviewStatus": {"user": ("authentication/v1.UserInfo", None, "")},
    "authentication/v1.UserInfo": {"extra": (None, None, "M")},
    "authentication/v1alpha1.SelfSubjectReview": {
        "status": ("authentication/v1alpha1.SelfSubjectReviewStatus", None, "")
    },
    "authentication/v1alpha1.SelfSubjectReviewStatus": {"userInfo": ("authentication/v1.UserInfo", None, "")},
    "authentication/v1beta1.SelfSubjectReview": {
        "status": ("authentication/v1beta1.SelfSubjectReviewStatus", None, "")
    },
    "authentication/v1beta1.SelfSubjectReviewStatus": {"userInfo": ("authentication/v1.UserInfo", None, "")},
    "authentication/v1beta1.TokenReview": {"status": ("authentication/v1beta1.TokenReviewStatus", None, "")},
    "authentication/v1beta1.TokenReviewStatus": {"user": ("authentication/v1beta1.UserInfo", None, "")},
    "authentication/v1beta1.UserInfo": {"extra": (None, None, "M")},
    "authorization/v1.LocalSubjectAccessReview": {"spec": ("authorization/v1.SubjectAccessReviewSpec", None, "")},
    "authorization/v1.NonResourceRule": {"verbs": (None, None, "L")},
    "authorization/v1.ResourceRule": {"verbs": (None, None, "L")},
    "authorization/v1.SelfSubjectRulesReview": {"status": ("authorization/v1.SubjectRulesReviewStatus", None, "")},
    "authorization/v1.SubjectAccessReview": {"spec": ("authorization/v1.SubjectAccessReviewSpec", None, "")},
    "authorization/v1.SubjectAccessReviewSpec": {"extra": (None, None, "M")},
    "authorization/v1.SubjectRulesReviewStatus": {
        "nonResourceRules": ("authorization/v1.NonResourceRule", None, "L"),
        "resourceRules": ("authorization/v1.ResourceRule", None, "L"),
    },
    "authorization/v1beta1.LocalSubjectAccessReview": {
        "spec": ("authorization/v1beta1.SubjectAccessReviewSpec", None, "")
    },
    "authorization/v1beta1.NonResourceRule": {"verbs": (None, None, "L")},
    "authorization/v1beta1.ResourceRule": {"verbs": (None, None, "L")},
    "authorization/v1beta1.SelfSubjectRulesReview": {
        "status": ("authorization/v1beta1.SubjectRulesReviewStatus", None, "")
    },
    "authorization/v1beta1.SubjectAccessReview": {"spec": ("authorization/v1beta1.SubjectAccessReviewSpec", None, "")},
    "authorization/v1beta1.SubjectAccessReviewSpec": {"extra": (None, None, "M")},
    "authorization/v1beta1.SubjectRulesReviewStatus": {
        "nonResourceRules": ("authorization/v1beta1.NonResourceRule", None, "L"),
        "resourceRules": ("authorization/v1beta1.ResourceRule", None, "L"),
    },
    "autoscaling/v2.HorizontalPodAutoscaler": {"status": ("autoscaling/v2.HorizontalPodAutoscalerStatus", None, "")},
    "autoscaling/v2.HorizontalPodAutoscalerStatus": {
        "conditions": (None, "type", ""),
        "currentMetrics": (None, None, "L"),
    },
    "batch/v1.CronJob": {"spec": ("batch/v1.CronJobSpec", None, "")},
    "batch/v1.CronJobSpec": {"jobTemplate": ("batch/v1.JobTemplateSpec", None, "")},
    "batch/v1.Job": {"spec": ("batch/v1.JobSpec", None, ""), "status": ("batch/v1.JobStatus", None, "")},
    "batch/v1.JobSpec": {
        "podFailurePolicy": ("batch/v1.PodFailurePolicy", None, ""),
        "successPolicy": ("batch/v1.SuccessPolicy", None, ""),
        "template": ("core/v1.PodTemplateSpec", None, ""),
    },
    "batch/v1.JobStatus": {"conditions": (None, "type", "")},
    "batch/v1.JobTemplateSpec": {"spec": ("batch/v1.JobSpec", None, "")},
    "batch/v1.PodFailurePolicy": {"rules": ("batch/v1.PodFailurePolicyRule", None, "L")},
    "batch/v1.PodFailurePolicyOnExitCodesRequirement": {"values": (None, None, "L")},
    "batch/v1.PodFailurePolicyRule": {"onExitCodes": ("batch/v1.PodFailurePolicyOnExitCodesRequirement", None, "")},
    "batch/v1.SuccessPolicy": {"rules": (None, None, "L")},
    "batch/v1beta1.CronJob": {"spec": ("batch/v1beta1.CronJobSpec", None, "")},
    "batch/v1beta1.CronJobSpec": {"jobTemplate": ("batch/v1beta1.JobTemplateSpec", None, "")},
    "batch/v1beta1.JobTemplateSpec": {"spec": ("batch/v1.JobSpec", None, "")},
    "certificates/v1.CertificateSigningRequest": {"spec": ("certificates/v1.CertificateSigningRequestSpec", None, "")},
    "certificates/v1.CertificateSigningRequestSpec": {"extra": (None, None, "M")},
    "certificates/v1beta1.CertificateSigningRequest": {
        "spec": ("certificates/v1beta1.CertificateSigningRequestSpec", None, "")
    },
    "certificates/v1beta1.CertificateSigningRequestSpec": {"extra": (None, None, "M")},
    "certificates/v1beta1.PodCertificateRequest": {
        "spec": ("certificates/v1beta1.PodCertificateRequestSpec", None, ""),
        "status": ("certificates/v1beta1.PodCertificateRequestStatus", None, ""),
    },
    "certificates/v1beta1.PodCertificateRequestSpec": {"unverifiedUserAnnotations": (None, None, "M")},
    "certificates/v1beta1.PodCertificateRequestStatus": {"conditions": (None, "type", "")},
    "core/v1.Affinity": {"nodeAffinity": ("core/v1.NodeAffinity", None, "")},
    "core/v1.CSIPersistentVolumeSource": {"volumeAttributes": (None, None, "M")},
    "core/v1.CSIVolumeSource": {"volumeAttributes": (None, None, "M")},
    "core/v1.CephFSPersistentVolumeSource": {"monitors": (None, None, "L")},
    "core/v1.CephFSVolumeSource": {"monitors": (None, None, "L")},
    "core/v1.ComponentStatus": {"conditions": (None, "type", "")},
    "core/v1.ConfigMap": {"binaryData": (None, None, "M"), "data": (None, None, "M")},
    "core/v1.Container": {
        "env": (None, "name", ""),
        "ports": (None, "containerPort", ""),
        "volumeDevices": (None, "devicePath", ""),
        "volumeMounts": (None, "mountPath", ""),
    },
    "core/v1.ContainerImage": {"names": (None, None, "L")},
    "core/v1.ContainerStatus": {
        "allocatedResourcesStatus": (None, "name", ""),
        "volumeMounts": (None, "mountPath", ""),
    },
    "core/v1.EphemeralContainer": {
        "env": (None, "name", ""),
        "ports": (None, "containerPort", ""),
        "volumeDevices": (None, "devicePath", ""),
        "volumeMounts": (None, "mountPath", ""),
    },
    "core/v1.FlexPersistentVolumeSource": {"options": (None, None, "M")},
    "core/v1.FlexVolumeSource": {"options": (None, None, "M")},
    "core/v1.LimitRange": {"spec": ("core/v1.LimitRangeSpec", None, "")},
    "core/v1.LimitRangeSpec": {"limits": (None, None, "L")},
    "core/v1.Namespace": {"status": ("core/v1.NamespaceStatus", None, "")},
    "core/v1.NamespaceStatus": {"conditions": (None, "type", "")},
    "core/v1.Node": {"status": ("core/v1.NodeStatus", None, "")},
    "core/v1.NodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ("core/v1.NodeSelector", None, "")},
    "core/v1.NodeAllocatableResourceClaimStatus": {"resources": (None, None, "M")},
    "core/v1.NodeSelector": {"nodeSelectorTerms": (None, None, "L")},
    "core/v1.NodeStatus": {
        "addresses": (None, "type", ""),
        "conditions": (None, "type", ""),
        "images": ("core/v1.ContainerImage", None, ""),
    },
    "core/v1.PersistentVolume": {"spec": ("core/v1.PersistentVolumeSpec", None, "")},
    "core/v1.PersistentVolumeClaim": {"status": ("core/v1.PersistentVolumeClaimStatus", None, "")},
    "core/v1.PersistentVolumeClaimStatus": {
        "allocatedResourceStatuses": (None, None, "M"),
        "conditions": (None, "type", ""),
    },
    "core/v1.PersistentVolumeSpec": {
        "cephfs": ("core/v1.CephFSPersistentVolumeSource", None, ""),
        "csi": ("core/v1.CSIPersistentVolumeSource", None, ""),
        "flexVolume": ("core/v1.FlexPersistentVolumeSource", None, ""),
        "nodeAffinity": ("core/v1.VolumeNodeAffinity", None, ""),
        "rbd": ("core/v1.RBDPersistentVolumeSource", None, ""),
    },
    "core/v1.Pod": {"spec": ("core/v1.PodSpec", None, ""), "status": ("core/v1.PodStatus", None, "")},
    "core/v1.PodCertificateProjection": {"userAnnotations": (None, None, "M")},
    "core/v1.PodExecOptions": {"command": (None, None, "L")},
    "core/v1.PodExtendedResourceClaimStatus": {"requestMappings": (None, None, "L")},
    "core/v1.PodSpec": {
        "affinity": ("core/v1.Affinity", None, ""),
        "containers": ("core/v1.Container", "name", "L"),
        "ephemeralContainers": ("core/v1.EphemeralContainer", "name", ""),
        "hostAliases": (None, "ip", ""),
        "imagePullSecrets": (None, "name", ""),
        "initContainers": ("core/v1.Container", "name", ""),
        "nodeSelector": (None, None, "M"),
        "resourceClaims": (None, "name", ""),
        "schedulingGates": (None, "name", ""),
        "topologySpreadConstraints": (None, "topologyKey", ""),
        "volumes": ("core/v1.Volume", "name", ""),
    },
    "core/v1.PodStatus": {
        "conditions": (None, "type", ""),
        "containerStatuses": ("core/v1.ContainerStatus", None, ""),
        "ephemeralContainerStatuses": ("core/v1.ContainerStatus", None, ""),
        "extendedResourceClaimStatus": ("core/v1.PodExtendedResourceClaimStatus", None, ""),
        "hostIPs": (None, "ip", ""),
        "initContainerStatuses": ("core/v1.ContainerStatus", None, ""),
        "nodeAllocatableResourceClaimStatuses": ("core/v1.NodeAllocatableResourceClaimStatus", None, ""),
        "podIPs": (None, "ip", ""),
        "resourceClaimStatuses": (None, "name", ""),
    },
    "core/v1.PodStatusResult": {"status": ("core/v1.PodStatus", None, "")},
    "core/v1.PodTemplate": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "core/v1.PodTemplateSpec": {"spec": ("core/v1.PodSpec", None, "")},
    "core/v1.ProjectedVolumeSource": {"sources": ("core/v1.VolumeProjection", None, "L")},
    "core/v1.RBDPersistentVolumeSource": {"monitors": (None, None, "L")},
    "core/v1.RBDVolumeSource": {"monitors": (None, None, "L")},
    "core/v1.ReplicationController": {
        "spec": ("core/v1.ReplicationControllerSpec", None, ""),
        "status": ("core/v1.ReplicationControllerStatus", None, ""),
    },
    "core/v1.ReplicationControllerSpec": {
        "selector": (None, None, "M"),
        "template": ("core/v1.PodTemplateSpec", None, ""),
    },
    "core/v1.ReplicationControllerStatus": {"conditions": (None, "type", "")},
    "core/v1.Secret": {"data": (None, None, "M"), "stringData": (None, None, "M")},
    "core/v1.Service": {"spec": ("core/v1.ServiceSpec", None, ""), "status": ("core/v1.ServiceStatus", None, "")},
    "core/v1.ServiceAccount": {"secrets": (None, "name", "")},
    "core/v1.ServiceSpec": {"ports": (None, "port", ""), "selector": (None, None, "M")},
    "core/v1.ServiceStatus": {"conditions": (None, "type", "")},
    "core/v1.TopologySelectorLabelRequirement": {"values": (None, None, "L")},
    "core/v1.TopologySelectorTerm": {"matchLabelExpressions": ("core/v1.TopologySelectorLabelRequirement", None, "")},
    "core/v1.Volume": {
        "cephfs": ("core/v1.CephFSVolumeSource", None, ""),
        "csi": ("core/v1.CSIVolumeSource", None, ""),
        "flexVolume": ("core/v1.FlexVolumeSource", None, ""),
        "projected": ("core/v1.ProjectedVolumeSource", None, ""),
        "rbd": ("core/v1.RBDVolumeSource", None, ""),
    },
    "core/v1.VolumeNodeAffinity": {"required": ("core/v1.NodeSelector", None, "")},
    "core/v1.VolumeProjection": {"podCertificate": ("core/v1.PodCertificateProjection", None, "")},
    "discovery/v1.Endpoint": {"addresses": (None, None, "L"), "deprecatedTopology": (None, None, "M")},
    "discovery/v1.EndpointSlice": {"endpoints": ("discovery/v1.Endpoint", None, "L"), "ports": (None, None, "L")},
    "discovery/v1beta1.Endpoint": {"addresses": (None, None, "L"), "topology": (None, None, "M")},
    "discovery/v1beta1.EndpointSlice": {
        "endpoints": ("discovery/v1beta1.Endpoint", None, "L"),
        "ports": (None, None, "L"),
    },
    "extensions/v1beta1.DaemonSet": {
        "spec": ("extensions/v1beta1.DaemonSetSpec", None, ""),
        "status": ("extensions/v1beta1.DaemonSetStatus", None, ""),
    },
    "extensions/v1beta1.DaemonSetSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "extensions/v1beta1.DaemonSetStatus": {"conditions": (None, "type", "")},
    "extensions/v1beta1.Deployment": {
        "spec": ("extensions/v1beta1.DeploymentSpec", None, ""),
        "status": ("extensions/v1beta1.DeploymentStatus", None, ""),
    },
    "extensions/v1beta1.DeploymentRollback": {"updatedAnnotations": (None, None, "M")},
    "extensions/v1beta1.DeploymentSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "extensions/v1beta1.DeploymentStatus": {"conditions": (None, "type", "")},
    "extensions/v1beta1.HTTPIngressRuleValue": {"paths": (None, None, "L")},
    "extensions/v1beta1.Ingress": {"spec": ("extensions/v1beta1.IngressSpec", None, "")},
    "extensions/v1beta1.IngressRule": {"http": ("extensions/v1beta1.HTTPIngressRuleValue", None, "")},
    "extensions/v1beta1.IngressSpec": {"rules": ("extensions/v1beta1.IngressRule", None, "")},
    "extensions/v1beta1.ReplicaSet": {
        "spec": ("extensions/v1beta1.ReplicaSetSpec", None, ""),
        "status": ("extensions/v1beta1.ReplicaSetStatus", None, ""),
    },
    "extensions/v1beta1.ReplicaSetSpec": {"template": ("core/v1.PodTemplateSpec", None, "")},
    "extensions/v1beta1.ReplicaSetStatus": {"conditions": (None, "type", "")},
    "extensions/v1beta1.Scale": {"status": ("extensions/v1beta1.ScaleStatus", None, "")},
    "extensions/v1beta1.ScaleStatus": {"selector": (None, None, "M")},
    "flowcontrol/v1.FlowSchema": {
        "spec": ("flowcontrol/v1.FlowSchemaSpec", None, ""),
        "status": ("flowcontrol/v1.FlowSchemaStatus", None, ""),
    },
    "flowcontrol/v1.FlowSchemaSpec": {"rules": ("flowcontrol/v1.PolicyRulesWithSubjects", None, "")},
    "flowcontrol/v1.FlowSchemaStatus": {"conditions": (None, "type", "")},
    "flowcontrol/v1.NonResourcePolicyRule": {"nonResourceURLs": (None, None, "L"), "verbs": (None, None, "L")},
    "flowcontrol/v1.PolicyRulesWithSubjects": {
        "nonResourceRules": ("flowcontrol/v1.NonResourcePolicyRule", None, ""),
        "resourceRules": ("flowcontrol/v1.ResourcePolicyRule", None, ""),
        "subjects": (None, None, "L"),
    },
    "flowcontrol/v1.PriorityLevelConfiguration": {
        "status": ("flowcontrol/v1.PriorityLevelConfigurationStatus", None, "")
    },
    "flowcontrol/v1.PriorityLevelConfigurationStatus": {"conditions": (None, "type", "")},
    "flowcontrol/v1.ResourcePolicyRule": {
        "apiGroups": (None, None, "L"),
        "namespaces": (None, None, "L"),
        "resources": (None, None, "L"),
        "verbs": (None, None, "L"),
    },
    "flowcontrol/v1beta1.FlowSchema": {"spec": ("flowcontrol/v1beta1.FlowSchemaSpec", None, "")},
    "flowcontrol/v1beta1.FlowSchemaSpec": {"rules": ("flowcontrol/v1beta1.PolicyRulesWithSubjects", None, "")},
    "flowcontrol/v1beta1.NonResourcePolicyRule": {"nonResourceURLs": (None, None, "L"), "verbs": (None, None, "L")},
    "flowcontrol/v1beta1.PolicyRulesWithSubjects": {
        "nonResourceRules": ("flowcontrol/v1beta1.NonResourcePolicyRule", None, ""),
        "resourceRules": ("flowcontrol/v1beta1.ResourcePolicyRule", None, ""),
        "subjects": (None, None, "L"),
    },
    "flowcontrol/v1beta1.ResourcePolicyRule": {
        "apiGroups": (None, None, "L"),
        "namespaces": (None, None, "L"),
        "resources": (None, None, "L"),
        "verbs": (None, None, "L"),
    },
    "flowcontrol/v1beta2.FlowSchema": {"spec": ("flowcontrol/v1beta2.FlowSchemaSpec", None, "")},
    "flowcontrol/v1beta2.FlowSchemaSpec": {"rules": ("flowcontrol/v1beta2.PolicyRulesWithSubjects", None, "")},
    "flowcontrol/v1beta2.NonResourcePolicyRule": {"nonResourceURLs": (None, None, "L"), "verbs": (None, None, "L")},
    "flowcontrol/v1beta2.PolicyRulesWithSubjects": {
        "nonResourceRules": ("flowcontrol/v1beta2.NonResourcePolicyRule", None, ""),
        "resourceRules": ("flowcontrol/v1beta2.ResourcePolicyRule", None, ""),
        "subjects": (None, None, "L"),
    },
    "flowcontrol/v1beta2.ResourcePolicyRule": {
        "apiGroups": (None, None, "L"),
        "namespaces": (None, None, "L"),
        "resources": (None, None, "L"),
        "verbs": (None, None, "L"),
    },
    "flowcontrol/v1beta3.FlowSchema": {
        "spec": ("flowcontrol/v1beta3.FlowSchemaSpec", None, ""),
        "status": ("flowcontrol/v1beta3.FlowSchemaStatus", None, ""),
    },
    "flowcontrol/v1beta3.FlowSchemaSpec": {"rules": ("flowcontrol/v1beta3.PolicyRulesWithSubjects", None, "")},
    "flowcontrol/v1beta3.FlowSchemaStatus": {"conditions": (None, "type", "")},
    "flowcontrol/v1beta3.NonResourcePolicyRule": {"nonResourceURLs": (None, None, "L"), "verbs": (None, None, "L")},
    "flowcontrol/v1beta3.PolicyRulesWithSubjects": {
        "nonResourceRules": ("flowcontrol/v1beta3.NonResourcePolicyRule", None, ""),
        "resourceRules": ("flowcontrol/v1beta3.ResourcePolicyRule", None, ""),
        "subjects": (None, None, "L"),
    },
    "flowcontrol/v1beta3.PriorityLevelConfiguration": {
        "status": ("flowcontrol/v1beta3.PriorityLevelConfigurationStatus", None, "")
    },
    "flowcontrol/v1beta3.PriorityLevelConfigurationStatus": {"conditions": (None, "type", "")},
    "flowcontrol/v1beta3.ResourcePolicyRule": {
        "apiGroups": (None, None, "L"),
        "namespaces": (None, None, "L"),
        "resources": (None, None, "L"),
        "verbs": (None, None, "L"),
    },
    "networking/v1.HTTPIngressRuleValue": {"paths": (None, None, "L")},
    "networking/v1.Ingress": {"spec": ("networking/v1.IngressSpec", None, "")},
    "networking/v1.IngressRule": {"http": ("networking/v1.HTTPIngressRuleValue", None, "")},
    "networking/v1.IngressSpec": {"rules": ("networking/v1.IngressRule", None, "")},
    "networking/v1.ServiceCIDR": {"status": ("networking/v1.ServiceCIDRStatus", None, "")},
    "networking/v1.ServiceCIDRStatus": {"conditions": (None, "type", "")},
    "networking/v1beta1.HTTPIngressRuleValue": {"paths": (None, None, "L")},
    "networking/v1beta1.Ingress": {"spec": ("networking/v1beta1.IngressSpec", None, "")},
    "networking/v1beta1.IngressRule": {"http": ("networking/v1beta1.HTTPIngressRuleValue", None, "")},
    "networking/v1beta1.IngressSpec": {"rules": ("networking/v1beta1.IngressRule", None, "")},
    "networking/v1beta1.ServiceCIDR": {"status": ("networking/v1beta1.ServiceCIDRStatus", None, "")},
    "networking/v1beta1.ServiceCIDRStatus": {"conditions": (None, "type", "")},
    "node/v1.RuntimeClass": {"scheduling": ("node/v1.Scheduling", None, "")},
    "node/v1.Scheduling": {"nodeSelector": (None, None, "M")},
    "node/v1alpha1.RuntimeClass": {"spec": ("node/v1alpha1.RuntimeClassSpec", None, "")},
    "node/v1alpha1.RuntimeClassSpec": {"scheduling": ("node/v1alpha1.Scheduling", None, "")},
    "node/v1alpha1.Scheduling": {"nodeSelector": (None, None, "M")},
    "node/v1beta1.RuntimeClass": {"scheduling": ("node/v1beta1.Scheduling", None, "")},
    "node/v1beta1.Scheduling": {"nodeSelector": (None, None, "M")},
    "policy/v1.PodDisruptionBudget": {"status": ("policy/v1.PodDisruptionBudgetStatus", None, "")},
    "policy/v1.PodDisruptionBudgetStatus": {"conditions": (None, "type", ""), "disruptedPods": (None, None, "M")},
    "policy/v1beta1.PodDisruptionBudget": {"status": ("policy/v1beta1.PodDisruptionBudgetStatus", None, "")},
    "policy/v1beta1.PodDisruptionBudgetStatus": {"conditions": (None, "type", ""), "disruptedPods": (None, None, "M")},
    "rbac/v1.ClusterRole": {"rules": ("rbac/v1.PolicyRule", None, "L")},
    "rbac/v1.PolicyRule": {"verbs": (None, None, "L")},
    "rbac/v1.Role": {"rules": ("rbac/v1.PolicyRule", None, "L")},
    "rbac/v1alpha1.ClusterRole": {"rules": ("rbac/v1alpha1.PolicyRule", None, "L")},
    "rbac/v1alpha1.PolicyRule": {"verbs": (None, None, "L")},
    "rbac/v1alpha1.Role": {"rules": ("rbac/v1alpha1.PolicyRule", None, "L")},
    "rbac/v1beta1.ClusterRole": {"rules": ("rbac/v1beta1.PolicyRule", None, "L")},
    "rbac/v1beta1.PolicyRule": {"verbs": (None, None, "L")},
    "rbac/v1beta1.Role": {"rules": ("rbac/v1beta1.PolicyRule", None, "L")},
    "resource/v1.AllocatedDeviceStatus": {"conditions": (None, None, "L")},
    "resource/v1.AllocationResult": {
        "devices": ("resource/v1.DeviceAllocationResult", None, ""),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
    },
    "resource/v1.CapacityRequirements": {"requests": (None, None, "M")},
    "resource/v1.CounterSet": {"counters": (None, None, "M")},
    "resource/v1.Device": {
        "attributes": (None, None, "M"),
        "capacity": (None, None, "M"),
        "consumesCounters": ("resource/v1.DeviceCounterConsumption", None, ""),
        "nodeAllocatableResourceMappings": (None, None, "M"),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
    },
    "resource/v1.DeviceAllocationResult": {"results": ("resource/v1.DeviceRequestAllocationResult", None, "")},
    "resource/v1.DeviceClaim": {"requests": ("resource/v1.DeviceRequest", None, "L")},
    "resource/v1.DeviceCounterConsumption": {"counters": (None, None, "M")},
    "resource/v1.DeviceRequest": {
        "exactly": ("resource/v1.ExactDeviceRequest", None, ""),
        "firstAvailable": ("resource/v1.DeviceSubRequest", None, ""),
    },
    "resource/v1.DeviceRequestAllocationResult": {"consumedCapacity": (None, None, "M")},
    "resource/v1.DeviceSubRequest": {"capacity": ("resource/v1.CapacityRequirements", None, "")},
    "resource/v1.ExactDeviceRequest": {"capacity": ("resource/v1.CapacityRequirements", None, "")},
    "resource/v1.ResourceClaim": {
        "spec": ("resource/v1.ResourceClaimSpec", None, ""),
        "status": ("resource/v1.ResourceClaimStatus", None, ""),
    },
    "resource/v1.ResourceClaimSpec": {"devices": ("resource/v1.DeviceClaim", None, "")},
    "resource/v1.ResourceClaimStatus": {
        "allocation": ("resource/v1.AllocationResult", None, ""),
        "devices": ("resource/v1.AllocatedDeviceStatus", None, ""),
        "reservedFor": (None, "uid", ""),
    },
    "resource/v1.ResourceClaimTemplate": {"spec": ("resource/v1.ResourceClaimTemplateSpec", None, "")},
    "resource/v1.ResourceClaimTemplateSpec": {"spec": ("resource/v1.ResourceClaimSpec", None, "")},
    "resource/v1.ResourceSlice": {"spec": ("resource/v1.ResourceSliceSpec", None, "")},
    "resource/v1.ResourceSliceSpec": {
        "devices": ("resource/v1.Device", None, ""),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
        "sharedCounters": ("resource/v1.CounterSet", None, ""),
    },
    "resource/v1alpha3.DeviceTaintRule": {"status": ("resource/v1alpha3.DeviceTaintRuleStatus", None, "")},
    "resource/v1alpha3.DeviceTaintRuleStatus": {"conditions": (None, "type", "")},
    "resource/v1alpha3.ResourcePoolStatusRequest": {
        "status": ("resource/v1alpha3.ResourcePoolStatusRequestStatus", None, "")
    },
    "resource/v1alpha3.ResourcePoolStatusRequestStatus": {"conditions": (None, "type", "")},
    "resource/v1beta1.AllocatedDeviceStatus": {"conditions": (None, None, "L")},
    "resource/v1beta1.AllocationResult": {
        "devices": ("resource/v1beta1.DeviceAllocationResult", None, ""),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
    },
    "resource/v1beta1.BasicDevice": {
        "attributes": (None, None, "M"),
        "capacity": (None, None, "M"),
        "consumesCounters": ("resource/v1beta1.DeviceCounterConsumption", None, ""),
        "nodeAllocatableResourceMappings": (None, None, "M"),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
    },
    "resource/v1beta1.CapacityRequirements": {"requests": (None, None, "M")},
    "resource/v1beta1.CounterSet": {"counters": (None, None, "M")},
    "resource/v1beta1.Device": {"basic": ("resource/v1beta1.BasicDevice", None, "")},
    "resource/v1beta1.DeviceAllocationResult": {
        "results": ("resource/v1beta1.DeviceRequestAllocationResult", None, "")
    },
    "resource/v1beta1.DeviceClaim": {"requests": ("resource/v1beta1.DeviceRequest", None, "L")},
    "resource/v1beta1.DeviceCounterConsumption": {"counters": (None, None, "M")},
    "resource/v1beta1.DeviceRequest": {
        "capacity": ("resource/v1beta1.CapacityRequirements", None, ""),
        "firstAvailable": ("resource/v1beta1.DeviceSubRequest", None, ""),
    },
    "resource/v1beta1.DeviceRequestAllocationResult": {"consumedCapacity": (None, None, "M")},
    "resource/v1beta1.DeviceSubRequest": {"capacity": ("resource/v1beta1.CapacityRequirements", None, "")},
    "resource/v1beta1.ResourceClaim": {
        "spec": ("resource/v1beta1.ResourceClaimSpec", None, ""),
        "status": ("resource/v1beta1.ResourceClaimStatus", None, ""),
    },
    "resource/v1beta1.ResourceClaimSpec": {"devices": ("resource/v1beta1.DeviceClaim", None, "")},
    "resource/v1beta1.ResourceClaimStatus": {
        "allocation": ("resource/v1beta1.AllocationResult", None, ""),
        "devices": ("resource/v1beta1.AllocatedDeviceStatus", None, ""),
        "reservedFor": (None, "uid", ""),
    },
    "resource/v1beta1.ResourceClaimTemplate": {"spec": ("resource/v1beta1.ResourceClaimTemplateSpec", None, "")},
    "resource/v1beta1.ResourceClaimTemplateSpec": {"spec": ("resource/v1beta1.ResourceClaimSpec", None, "")},
    "resource/v1beta1.ResourceSlice": {"spec": ("resource/v1beta1.ResourceSliceSpec", None, "")},
    "resource/v1beta1.ResourceSliceSpec": {
        "devices": ("resource/v1beta1.Device", None, ""),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
        "sharedCounters": ("resource/v1beta1.CounterSet", None, ""),
    },
    "resource/v1beta2.AllocatedDeviceStatus": {"conditions": (None, None, "L")},
    "resource/v1beta2.AllocationResult": {
        "devices": ("resource/v1beta2.DeviceAllocationResult", None, ""),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
    },
    "resource/v1beta2.CapacityRequirements": {"requests": (None, None, "M")},
    "resource/v1beta2.CounterSet": {"counters": (None, None, "M")},
    "resource/v1beta2.Device": {
        "attributes": (None, None, "M"),
        "capacity": (None, None, "M"),
        "consumesCounters": ("resource/v1beta2.DeviceCounterConsumption", None, ""),
        "nodeAllocatableResourceMappings": (None, None, "M"),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
    },
    "resource/v1beta2.DeviceAllocationResult": {
        "results": ("resource/v1beta2.DeviceRequestAllocationResult", None, "")
    },
    "resource/v1beta2.DeviceClaim": {"requests": ("resource/v1beta2.DeviceRequest", None, "L")},
    "resource/v1beta2.DeviceCounterConsumption": {"counters": (None, None, "M")},
    "resource/v1beta2.DeviceRequest": {
        "exactly": ("resource/v1beta2.ExactDeviceRequest", None, ""),
        "firstAvailable": ("resource/v1beta2.DeviceSubRequest", None, ""),
    },
    "resource/v1beta2.DeviceRequestAllocationResult": {"consumedCapacity": (None, None, "M")},
    "resource/v1beta2.DeviceSubRequest": {"capacity": ("resource/v1beta2.CapacityRequirements", None, "")},
    "resource/v1beta2.DeviceTaintRule": {"status": ("resource/v1beta2.DeviceTaintRuleStatus", None, "")},
    "resource/v1beta2.DeviceTaintRuleStatus": {"conditions": (None, "type", "")},
    "resource/v1beta2.ExactDeviceRequest": {"capacity": ("resource/v1beta2.CapacityRequirements", None, "")},
    "resource/v1beta2.ResourceClaim": {
        "spec": ("resource/v1beta2.ResourceClaimSpec", None, ""),
        "status": ("resource/v1beta2.ResourceClaimStatus", None, ""),
    },
    "resource/v1beta2.ResourceClaimSpec": {"devices": ("resource/v1beta2.DeviceClaim", None, "")},
    "resource/v1beta2.ResourceClaimStatus": {
        "allocation": ("resource/v1beta2.AllocationResult", None, ""),
        "devices": ("resource/v1beta2.AllocatedDeviceStatus", None, ""),
        "reservedFor": (None, "uid", ""),
    },
    "resource/v1beta2.ResourceClaimTemplate": {"spec": ("resource/v1beta2.ResourceClaimTemplateSpec", None, "")},
    "resource/v1beta2.ResourceClaimTemplateSpec": {"spec": ("resource/v1beta2.ResourceClaimSpec", None, "")},
    "resource/v1beta2.ResourceSlice": {"spec": ("resource/v1beta2.ResourceSliceSpec", None, "")},
    "resource/v1beta2.ResourceSliceSpec": {
        "devices": ("resource/v1beta2.Device", None, ""),
        "nodeSelector": ("core/v1.NodeSelector", None, ""),
        "sharedCounters": ("resource/v1beta2.CounterSet", None, ""),
    },
    "scheduling/v1alpha2.PodGroup": {
        "spec": ("scheduling/v1alpha2.PodGroupSpec", None, ""),
        "status": ("scheduling/v1alpha2.PodGroupStatus", None, ""),
    },
    "scheduling/v1alpha2.PodGroupSpec": {"resourceClaims": (None, "name", "")},
    "scheduling/v1alpha2.PodGroupStatus": {
        "conditions": (None, "type", ""),
        "resourceClaimStatuses": (None, "name", ""),
    },
    "scheduling/v1alpha2.PodGroupTemplate": {"resourceClaims": (None, "name", "")},
    "scheduling/v1alpha2.Workload": {"spec": ("scheduling/v1alpha2.WorkloadSpec", None, "")},
    "scheduling/v1alpha2.WorkloadSpec": {"podGroupTemplates": ("scheduling/v1alpha2.PodGroupTemplate", None, "L")},
    "storage/v1.CSINode": {"spec": ("storage/v1.CSINodeSpec", None, "")},
    "storage/v1.CSINodeDriver": {"topologyKeys": (None, None, "L")},
    "storage/v1.CSINodeSpec": {"drivers": ("storage/v1.CSINodeDriver", "name", "L")},
    "storage/v1.StorageClass": {
        "allowedTopologies": ("core/v1.TopologySelectorTerm", None, ""),
        "parameters": (None, None, "M"),
    },
    "storage/v1.VolumeAttachment": {
        "spec": ("storage/v1.VolumeAttachmentSpec", None, ""),
        "status": ("storage/v1.VolumeAttachmentStatus", None, ""),
    },
    "storage/v1.VolumeAttachmentSource": {"inlineVolumeSpec": ("core/v1.PersistentVolumeSpec", None, "")},
    "storage/v1.VolumeAttachmentSpec": {"source": ("storage/v1.VolumeAttachmentSource", None, "")},
    "storage/v1.VolumeAttachmentStatus": {"attachmentMetadata": (None, None, "M")},
    "storage/v1.VolumeAttributesClass": {"parameters": (None, None, "M")},
    "storage/v1alpha1.VolumeAttachment": {
        "spec": ("storage/v1alpha1.VolumeAttachmentSpec", None, ""),
        "status": ("storage/v1alpha1.VolumeAttachmentStatus", None, ""),
    },
    "storage/v1alpha1.VolumeAttachmentSource": {"inlineVolumeSpec": ("core/v1.PersistentVolumeSpec", None, "")},
    "storage/v1alpha1.VolumeAttachmentSpec": {"source": ("storage/v1alpha1.VolumeAttachmentSource", None, "")},
    "storage/v1alpha1.VolumeAttachmentStatus": {"attachmentMetadata": (None, None, "M")},
    "storage/v1alpha1.VolumeAttributesClass": {"parameters": (None, None, "M")},
    "storage/v1beta1.CSINode": {"spec": ("storage/v1beta1.CSINodeSpec", None, "")},
    "storage/v1beta1.CSINodeDriver": {"topologyKeys": (None, None, "L")},
    "storage/v1beta1.CSINodeSpec": {"drivers": ("storage/v1beta1.CSINodeDriver", "name", "L")},
    "storage/v1beta1.StorageClass": {
        "allowedTopologies": ("core/v1.TopologySelectorTerm", None, ""),
        "parameters": (None, None, "M"),
    },
    "storage/v1beta1.VolumeAttachment": {
        "spec": ("storage/v1beta1.VolumeAttachmentSpec", None, ""),
        "status": ("storage/v1beta1.VolumeAttachmentStatus", None, ""),
    },
    "storage/v1beta1.VolumeAttachmentSource": {"inlineVolumeSpec": ("core/v1.PersistentVolumeSpec", None, "")},
    "storage/v1beta1.VolumeAttachmentSpec": {"source": ("storage/v1beta1.VolumeAttachmentSource", None, "")},
    "storage/v1beta1.VolumeAttachmentStatus": {"attachmentMetadata": (None, None, "M")},
    "storage/v1beta1.VolumeAttributesClass": {"parameters": (None, None, "M")},
    "storagemigration/v1beta1.StorageVersionMigration": {
        "status": ("storagemigration/v1beta1.StorageVersionMigrationStatus", None, "")
    },
    "storagemigration/v1beta1.StorageVersionMigrationStatus": {"conditions": (None, "type", "")},
}
