"""The pod security of the job namespaces: one ValidatingAdmissionPolicy, generated from policies/.

Pod Security ``baseline`` is what a job's pods may do, plus exactly what the fabric profiles add
to them: their ``capabilities`` (IPC_LOCK, which baseline does not allow) in containers and init
containers that run a trainer image of a profile, and their device-plugin resources (the GPU
resource, and ``rdmaResources`` in those same containers). PodSecurity admission cannot say that:
it takes a level per namespace and exempts whole namespaces, users or runtime classes, never one
capability (kubernetes/pod-security-admission admission/admission.go, Exemptions), so the job
namespace enforces ``privileged`` there and this policy, in CEL, enforces the rest. kube-apiserver
evaluates it on every pod of the job namespaces (after the mutating webhooks: the fabric's
additions are what it sees), and ``trainyard validate`` evaluates the same policy, read from the
repository as the cluster renders it, on every pod it previews (:mod:`trainyard.repo.upstream.vap`).

The baseline controls follow kubernetes/pod-security-admission@v0.36.2 policy/check_*.go at its
latest version (each one named where it is written below): host namespaces, privileged,
capabilities (the 13 of ``capabilities_allowed_1_0``), hostPath volumes, host ports, AppArmor,
SELinux, /proc mount (relaxed for pods with ``hostUsers: false``, 1.35), seccomp, sysctls (the
1.32 list), Windows host processes, probe and lifecycle hosts (1.34). Two rules go beyond
baseline, for the issue of control-plane nodes: no toleration of every taint or of the
control-plane taints, and no ``spec.nodeName`` on creation (it bypasses the scheduler, Kueue and
the taints).

Every check visits init, regular and ephemeral containers, as PSA's ``visitContainers`` does; the
policy matches pod creation, ``pods/ephemeralcontainers`` and pod updates that change the spec
(PSA re-evaluates an update only when it changes images or adds containers, isSignificantPodUpdate;
a changed spec is a superset of those). Each failing rule's message names the pod, the container
(or volume, sysctl, toleration) and what to do.
"""

from __future__ import annotations

import yaml

from trainyard.contract import cel
from trainyard.repo.model import rawyaml
from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE
from webhook.policy import PolicySet

NAME = "trainyard-pod-security"
FOLDER = "base/pod-security"
FILE = "validating-admission-policy.yaml"

# kubernetes/pod-security-admission@v0.36.2:policy/check_capabilities_baseline.go capabilities_allowed_1_0
BASELINE_CAPABILITIES = (
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
)  # fmt: skip
# policy/check_sysctls.go sysctlsAllowedV1Dot32 (1.0 + 1.27 + 1.29 + 1.32)
BASELINE_SYSCTLS = (
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)  # fmt: skip
# policy/check_seLinuxOptions.go selinuxAllowedTypes1_31
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# policy/check_seccompProfile_baseline.go, check_appArmorProfile.go: the allowed profile types
PROFILE_TYPES = ("RuntimeDefault", "Localhost")
# Compute resources every pod may state (k8s.io/api core/v1 ResourceName: cpu, memory, ephemeral-storage,
# hugepages-<size>); any other name is a device plugin's or an extended resource.
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# The taint kubeadm puts on control-plane nodes, and its older name (kubernetes/kubernetes:
# cmd/kubeadm/app/constants/constants.go LabelNodeRoleControlPlane, LabelNodeRoleOldControlPlane).
CONTROL_PLANE_TAINTS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


def _list(items: object) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"  # type: ignore[union-attr]


def _each(predicate: str, describe: str = "'container ' + c.name", *, ephemeral: bool = True) -> str:
    """The containers (init and regular, then ephemeral) for which ``predicate`` holds, each
    described by ``describe``: a list of strings, so that the two container types never mix."""
    out = f"variables.containers.filter(c, {predicate}).map(c, {describe})"
    if ephemeral:
        out += f" + variables.ephemeral.filter(c, {predicate}).map(c, {describe})"
    return out


def _sc(field: str) -> str:
    return f"has(c.securityContext) && has(c.securityContext.{field})"


def _pod_sc(field: str) -> str:
    return f"has(object.spec.securityContext) && has(object.spec.securityContext.{field})"


def _selinux_ok(o: str) -> str:
    return (
        f"(!has({o}.type) || {o}.type in {_list(SELINUX_TYPES)}) && (!has({o}.user) || {o}.user == '') && "
        f"(!has({o}.role) || {o}.role == '')"
    )


def _host_set(handler: str) -> str:
    return (
        f"(has({handler}.httpGet) && has({handler}.httpGet.host) && {handler}.httpGet.host != '') || "
        f"(has({handler}.tcpSocket) && has({handler}.tcpSocket.host) && {handler}.tcpSocket.host != '')"
    )


def _probe_hosts() -> str:
    parts = [f"(has(c.{p}) && ({_host_set('c.' + p)}))" for p in ("livenessProbe", "readinessProbe", "startupProbe")]
    parts += [
        f"(has(c.lifecycle) && has(c.lifecycle.{h}) && ({_host_set('c.lifecycle.' + h)}))"
        for h in ("postStart", "preStop")
    ]
    return " || ".join(parts)


def _trainer(policies: PolicySet) -> str:
    """A container ``c`` runs a trainer image, by the one identity rule (trainyard/contract/images.py)
    as the webhook and the fabric policies decide it: a spelling the webhook gives IPC_LOCK to
    (``REGISTRY.example.com:443/...``) must not be refused here for having it."""
    repositories = sorted({r for n in policies.names if (p := policies.get(n)) for r in p.trainer_images})
    return f"has(c.image) && {cel.is_trainer('c', repositories)}"


ADDED = "c.securityContext.capabilities.add"
HAS_ADDED = f"{_sc('capabilities')} && has({ADDED})"
RESOURCES = (
    "(has(c.resources) && has(c.resources.limits) ? c.resources.limits.map(k, k) : []) + "
    "(has(c.resources) && has(c.resources.requests) ? c.resources.requests.map(k, k) : [])"
)
KNOWN_RESOURCE = (
    "r in variables.standardResources || r.startsWith('hugepages-') || r in variables.gpuResources || "
    "r in variables.fabricResources"
)


def _variables(policies: PolicySet) -> list[dict]:
    profiles = [policies.get(n) for n in policies.names]
    trainer = _trainer(policies)
    images = sorted({i for p in profiles if p for i in p.spec.trainer_images})
    caps = sorted({c for p in profiles if p for c in p.spec.capabilities} - set(BASELINE_CAPABILITIES))
    gpus = sorted({p.spec.gpu_resource for p in profiles if p})
    rdma = sorted({r for p in profiles if p for r in p.spec.rdma_resources})
    pairs = [
        ("pod", "has(object.metadata.name) && object.metadata.name != '' ? object.metadata.name : "
                "(has(object.metadata.generateName) ? object.metadata.generateName + '<generated>' : '<unnamed>')"),
        ("containers", "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"),
        ("ephemeral", "has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : []"),
        # what the fabric profiles add (policies/*.yaml): trainer image repositories, capabilities, resources
        ("trainerImages", _list(images)),
        ("fabricCapabilities", _list(caps)),
        ("gpuResources", _list(gpus)),
        ("fabricResources", _list(rdma)),
        ("baselineCapabilities", _list(BASELINE_CAPABILITIES)),
        ("standardResources", _list(STANDARD_RESOURCES)),
        ("privileged", _each(f"{_sc('privileged')} && c.securityContext.privileged")),
        ("extraCapabilities", _each(
            f"{HAS_ADDED} && {ADDED}.exists(x, !(x in variables.baselineCapabilities) && "
            "!(x in variables.fabricCapabilities))",
            f"'container ' + c.name + ' adds ' + {ADDED}.filter(x, !(x in variables.baselineCapabilities) && "
            "!(x in variables.fabricCapabilities)).join(', ')",
        )),
        ("fabricCapabilitiesElsewhere",
         f"variables.containers.filter(c, !({trainer}) && {HAS_ADDED} && "
         f"{ADDED}.exists(x, x in variables.fabricCapabilities)).map(c, 'container ' + c.name + ' adds ' + "
         f"{ADDED}.filter(x, x in variables.fabricCapabilities).join(', ')) + "
         f"variables.ephemeral.filter(c, {HAS_ADDED} && {ADDED}.exists(x, x in variables.fabricCapabilities))"
         f".map(c, 'ephemeral container ' + c.name + ' adds ' + "
         f"{ADDED}.filter(x, x in variables.fabricCapabilities).join(', '))"),
        ("hostPathVolumes",
         "has(object.spec.volumes) ? object.spec.volumes.filter(v, has(v.hostPath)).map(v, 'volume ' + v.name) : []"),
        ("hostPorts", _each("has(c.ports) && c.ports.exists(p, has(p.hostPort) && p.hostPort != 0)")),
        ("appArmor", _each(
            f"{_sc('appArmorProfile')} && has(c.securityContext.appArmorProfile.type) && "
            f"!(c.securityContext.appArmorProfile.type in {_list(PROFILE_TYPES)})"
        )),
        ("seLinux", _each(f"{_sc('seLinuxOptions')} && !({_selinux_ok('c.securityContext.seLinuxOptions')})")),
        ("procMount", _each(f"{_sc('procMount')} && c.securityContext.procMount != 'Default'")),
        ("seccomp", _each(
            f"{_sc('seccompProfile')} && has(c.securityContext.seccompProfile.type) && "
            f"!(c.securityContext.seccompProfile.type in {_list(PROFILE_TYPES)})"
        )),
        ("windowsHostProcess", _each(
            f"{_sc('windowsOptions')} && has(c.securityContext.windowsOptions.hostProcess) && "
            "c.securityContext.windowsOptions.hostProcess"
        )),
        ("probeHosts", _each(_probe_hosts())),
        ("sysctls", f"{_pod_sc('sysctls')} ? object.spec.securityContext.sysctls.filter(s, "
                    f"!(s.name in {_list(BASELINE_SYSCTLS)})).map(s, 'sysctl ' + s.name) : []"),
        ("unknownResources", _each(
            f"({RESOURCES}).exists(r, !({KNOWN_RESOURCE}))",
            f"'container ' + c.name + ' asks for ' + ({RESOURCES}).filter(r, !({KNOWN_RESOURCE})).join(', ')",
            ephemeral=False,
        )),
        ("fabricResourcesElsewhere", _each(
            f"!({trainer}) && ({RESOURCES}).exists(r, r in variables.fabricResources)",
            f"'container ' + c.name + ' asks for ' + "
            f"({RESOURCES}).filter(r, r in variables.fabricResources).join(', ')",
            ephemeral=False,
        )),
        ("wideTolerations",
         "has(object.spec.tolerations) ? object.spec.tolerations.filter(t, ((!has(t.key) || t.key == '') && "
         "has(t.operator) && t.operator == 'Exists') || (has(t.key) && t.key in "
         f"{_list(CONTROL_PLANE_TAINTS)})).map(t, has(t.key) && t.key != '' ? 'the taint ' + t.key : "
         "'every taint (no key, operator Exists)') : []"),
    ]  # fmt: skip
    return [{"name": n, "expression": e} for n, e in pairs]


BASELINE = "Pod Security baseline"


def _validations(policies: PolicySet) -> list[tuple[str, str]]:
    """(expression, messageExpression) of each rule, in the order kube-apiserver reports them."""
    images = ", ".join(sorted({i for n in policies.names if (p := policies.get(n)) for i in p.spec.trainer_images}))
    pod = "'pod ' + variables.pod + ': "

    def first(var: str, text: str) -> tuple[str, str]:  # every offender at once, so one round fixes them all
        return f"size(variables.{var}) == 0", f"{pod}' + variables.{var}.join('; ') + '{text}'"

    return [
        # check_hostNamespaces.go
        ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && "
         "object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
         f"{pod}hostNetwork, hostPID and hostIPC must be unset or false ({BASELINE}: host namespaces); a job "
         "talks over its own fabric attachment (net1) and needs none of the node namespaces'"),
        # check_privileged.go
        first("privileged", f": securityContext.privileged is true ({BASELINE} forbids privileged containers); "
              "remove it: what the fabric needs (IPC_LOCK, /dev/shm, RDMA devices) the webhook adds"),
        # check_capabilities_baseline.go, plus the profiles' capabilities
        first("extraCapabilities", f" in securityContext.capabilities.add, beyond {BASELINE} and the fabric profiles "
              f"({', '.join(BASELINE_CAPABILITIES)}; IPC_LOCK in trainer containers); remove it"),
        first("fabricCapabilitiesElsewhere", ", but only containers and init containers that run a trainer image "
              f"({images}) get the fabric capabilities; remove it, or run the trainer image there"),
        # check_hostPathVolumes.go
        first("hostPathVolumes", f" is a hostPath volume ({BASELINE} forbids them); use the namespace claims "
              "(training-checkpoints, training-datasets) or an emptyDir"),
        # check_hostPorts.go
        first("hostPorts", f": ports[].hostPort is set ({BASELINE} forbids host ports); use containerPort only, "
              "the pods reach each other by their pod or fabric addresses"),
        # check_appArmorProfile.go
        ("!has(object.metadata.annotations) || object.metadata.annotations.all(k, "
         "!k.startsWith('container.apparmor.security.beta.kubernetes.io/') || "
         "object.metadata.annotations[k] in ['', 'runtime/default'] || "
         "object.metadata.annotations[k].startsWith('localhost/'))",
         f"{pod}an AppArmor annotation is neither runtime/default nor localhost/* ({BASELINE}); remove it'"),
        (f"!({_pod_sc('appArmorProfile')}) || !has(object.spec.securityContext.appArmorProfile.type) || "
         f"object.spec.securityContext.appArmorProfile.type in {_list(PROFILE_TYPES)}",
         f"{pod}securityContext.appArmorProfile.type must be RuntimeDefault or Localhost ({BASELINE})'"),
        first("appArmor", f": securityContext.appArmorProfile.type must be RuntimeDefault or Localhost ({BASELINE})"),
        # check_seLinuxOptions.go
        (f"!({_pod_sc('seLinuxOptions')}) || ({_selinux_ok('object.spec.securityContext.seLinuxOptions')})",
         f"{pod}securityContext.seLinuxOptions may set no user or role and only the type "
         f"{', '.join(t for t in SELINUX_TYPES if t)} ({BASELINE})'"),
        first("seLinux", ": securityContext.seLinuxOptions may set no user or role and only the type "
              f"{', '.join(t for t in SELINUX_TYPES if t)} ({BASELINE})"),
        # check_procMount_baseline.go (any value in a user namespace, 1.35)
        ("(has(object.spec.hostUsers) && !object.spec.hostUsers) || size(variables.procMount) == 0",
         f"{pod}' + variables.procMount.join('; ') + ': securityContext.procMount must be Default unless the pod sets "
         f"hostUsers: false ({BASELINE})'"),
        # check_seccompProfile_baseline.go
        (f"!({_pod_sc('seccompProfile')}) || !has(object.spec.securityContext.seccompProfile.type) || "
         f"object.spec.securityContext.seccompProfile.type in {_list(PROFILE_TYPES)}",
         f"{pod}securityContext.seccompProfile.type must be RuntimeDefault or Localhost ({BASELINE}: no Unconfined)'"),
        first("seccomp", f": securityContext.seccompProfile.type must be RuntimeDefault or Localhost ({BASELINE})"),
        # check_sysctls.go
        first("sysctls", f" is not a sysctl {BASELINE} allows ({', '.join(BASELINE_SYSCTLS)}); remove it"),
        # check_windowsHostProcess.go
        (f"!({_pod_sc('windowsOptions')}) || !has(object.spec.securityContext.windowsOptions.hostProcess) || "
         "!object.spec.securityContext.windowsOptions.hostProcess",
         f"{pod}windowsOptions.hostProcess must not be true ({BASELINE})'"),
        first("windowsHostProcess", f": windowsOptions.hostProcess must not be true ({BASELINE})"),
        # check_hostProbesAndhostLifecycle.go (1.34)
        first("probeHosts", f": a probe or lifecycle handler sets host ({BASELINE} from 1.34); leave host unset, "
              "the handler then reaches the pod itself"),
        # the fabric profiles' device-plugin resources
        first("unknownResources", ": only cpu, memory, ephemeral-storage, hugepages-*, the GPU resource and the "
              "RDMA resources of the fabric profiles may be requested in a job namespace; remove it"),
        first("fabricResourcesElsewhere", ", an RDMA resource of the fabric, but only containers that run a trainer "
              f"image ({images}) may ask for one"),
        # beyond baseline: the nodes a job may run on
        first("wideTolerations", " is tolerated: that lets the pod onto control-plane nodes; tolerate only the "
              "taints of the GPU nodes (the webhook adds nvidia.com/gpu)"),
        ("request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''",
         f"{pod}spec.nodeName is set: it bypasses the scheduler, Kueue and the node taints; select nodes with a "
         "nodeSelector on the node pool labels instead'"),
    ]  # fmt: skip


def policy(policies: PolicySet) -> dict:
    """The ValidatingAdmissionPolicy for the fabric profiles of ``policies``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "trainyard"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods", "pods/ephemeralcontainers"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "creation-or-a-changed-spec",
                    "expression": "request.operation != 'UPDATE' || object.spec != oldObject.spec",
                }
            ],
            "variables": _variables(policies),
            "validations": [
                {"expression": e, "messageExpression": m, "reason": "Forbidden"} for e, m in _validations(policies)
            ],
        },
    }


def binding() -> dict:
    """Bound to the job namespaces by name: the label kubernetes.io/metadata.name, which the API server
    sets on every namespace to its name (kubernetes/api@v0.36.5:core/v1/well_known_labels.go
    LabelMetadataName)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "trainyard"}},
        "spec": {
            "policyName": NAME,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [TRAINING_NAMESPACE]}
                    ]
                }
            },
        },
    }


class _Dumper(rawyaml.SafeDumper):  # type: ignore[misc,valid-type]
    """Long CEL expressions as folded block scalars, so that the file reads like the hand-written policies."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    folded = (len(value) > 100 or "'" in value) and "\n" not in value and "  " not in value
    style = ">" if folded else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(policies: PolicySet, source: str) -> str:
    """The policy and its binding as the file ``trainyard generate`` writes (``source``: policies/)."""
    head = (
        f"# Generated by `trainyard generate` from {source}; do not edit (trainyard validate fails when this\n"
        "# file differs from what the profiles generate). Pod Security baseline plus what the fabric profiles add,\n"
        "# for every pod of the job namespaces (trainyard/repo/generate/pod_security.py says which upstream rule each\n"
        "# validation follows); trainyard validate evaluates this policy on every pod it previews.\n"
    )
    docs = [policy(policies), binding()]
    return head + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=110)
