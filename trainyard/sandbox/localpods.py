"""Pods as local process groups, each in its own network namespace (``make demo``, tests/e2e).

This stands in for the kubelet, the pod network and Multus on one machine. It follows the parts
of their contracts that a training job relies on, and no more:

- Network: each pod gets a network namespace with ``lo`` and ``eth0`` on a "cluster" bridge (the
  pod network) and, for each attachment its ``k8s.v1.cni.cncf.io/networks`` annotation asks
  for, an interface on that NetworkAttachmentDefinition's bridge, named as Multus names it
  (``net<position>`` unless the attachment asks for a name), with an address from the NAD's
  IPAM range (host-local ``rangeStart``..``rangeEnd`` of ``subnet``, or whereabouts ``range``).
  An attachment naming no known NAD fails the pod, as Multus does.
- DNS: every pod's name, and for a pod with ``hostname`` and ``subdomain`` (a JobSet's pods) its
  ``<hostname>.<subdomain>``, resolves to its ``eth0`` address (``/etc/netns/<ns>/hosts``, which
  ``ip netns exec`` mounts over ``/etc/hosts``), as the job's headless service would. Containers
  find an ``nslookup`` first on their PATH that answers from the same names, the way cluster DNS
  answers the Training Operator's init container, which waits for the master with ``nslookup``
  (kubeflow/trainer@v1.9.4:pkg/controller.v1/pytorch/initcontainer.go). A name two pods share (a
  JobSet pod recreated under its hostname) answers with the newest; a removed pod's names go.
  Each container has the pod's hostname in a UTS namespace of its own, which its hosts file
  resolves to its address, as the kubelet's /etc/hosts of a pod does.
- Containers: each container runs as a process group from its final spec: ``command`` (or the
  image's entrypoint, from ``entrypoints``) and ``args`` with ``$(VAR)`` expanded from the
  container's env as the kubelet expands them, and exactly the container's env (``valueFrom``
  supports ``fieldRef`` to ``metadata.name``, ``metadata.namespace``, ``status.podIP`` and
  ``metadata.labels['k']`` / ``metadata.annotations['k']``, the downward API's forms); HOSTNAME is
  the pod's hostname (``spec.hostname``, else its name).
- Init containers run first, one after the other, each to completion; a failed one is started
  again (restartPolicy OnFailure/Always) or fails the pod (Never), and the regular containers
  start once the last has succeeded, as the kubelet runs them (kubernetes.io/docs/concepts/
  workloads/pods/init-containers). Sidecars (init containers with restartPolicy Always) and pods
  that still carry scheduling gates (no scheduler would bind them) are refused.
- Volumes: a memory-backed emptyDir mounted at /dev/shm is a tmpfs of its ``sizeLimit`` in the
  pod's private mount namespace; a PersistentVolumeClaim is a host directory shared by all pods
  (ReadWriteMany); other emptyDirs are per-pod directories. Mount paths other than /dev/shm are
  mapped by rewriting the mount path prefix in command, args and env values (no host path is
  created outside the work directory).
- ``exec``: a command run inside a running container, in its network and mount namespaces and
  with its env, as ``kubectl exec`` runs it.
- restartPolicy OnFailure/Always: a container that exits non-zero is started again in the same
  pod (same namespace and addresses), up to ``max_restarts`` (None: for ever); with
  ``crashloop`` after the kubelet's CrashLoopBackOff (at once, then 10 s doubling to 5 minutes),
  else at once. Each container's last exit (code, start, end) is kept for its status.

Without root or ``ip netns``, :class:`LocalCluster` runs the containers as plain processes on
127.0.0.1 (``isolated`` is False): no per-pod interfaces, counters or /dev/shm, and the caller
says so. Everything created (namespaces, bridges, veths, hosts files, processes) is removed by
:meth:`LocalCluster.close`, which also runs at exit and on SIGTERM/SIGINT; a run that was
SIGKILLed is swept by the next one (its state file names what it made).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainyard.cluster.processes import CrashLoopBackOff
from trainyard.contract import networks
from trainyard.contract.errors import UserError
from trainyard.contract.images import parse_image
from trainyard.contract.k8s import expand
from trainyard.contract.names import NETWORKS_ANNOTATION, SHM_PATH
from trainyard.contract.nccl import GLOO_SOCKET_IFNAME, SOCKET_IFNAME
from trainyard.contract.quantity import parse_quantity
from trainyard.repo.model import nad
from trainyard.sandbox.processes import descendants

STATE_DIR = Path("/run/trainyard-localpods")
CLUSTER_CIDR = ipaddress.ip_network("10.244.99.0/24")


def isolation_available() -> tuple[bool, str]:
    """Whether pods can get their own network namespaces here, and if not, why."""
    if os.geteuid() != 0:
        return False, "not running as root"
    if shutil.which("ip") is None:
        return False, "the 'ip' command (iproute2) is not installed"
    for tool in ("nsenter", "unshare"):
        if shutil.which(tool) is None:
            return False, f"the '{tool}' command (util-linux) is not installed"
    probe = f"typrobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return False, f"'ip netns add' failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


# --- networks ------------------------------------------------------------------------------------


@dataclass
class Network:
    """One NetworkAttachmentDefinition, realised as a bridge with an address pool."""

    name: str
    namespace: str
    subnet: ipaddress.IPv4Network
    pool: Iterator[ipaddress.IPv4Address]
    bridge: str = ""

    @classmethod
    def from_nad(cls, doc: dict) -> Network:
        meta = doc.get("metadata") or {}
        where = f"NetworkAttachmentDefinition {meta.get('namespace', '')}/{meta.get('name', '')}"
        try:
            subnet, first, last = nad.address_range(nad.config(doc))
        except (ValueError, KeyError) as exc:
            raise UserError(f"{where}: spec.config: {exc}") from None
        lo = ipaddress.ip_address(first) if first else subnet.network_address + 1
        hi = ipaddress.ip_address(last) if last else subnet.broadcast_address - 1
        pool = (ipaddress.ip_address(n) for n in range(int(lo), int(hi) + 1))
        return cls(meta.get("name", ""), meta.get("namespace", "default"), subnet, pool)  # type: ignore[arg-type]


def _attachments(pod: dict, namespace: str) -> list[tuple[str, str, str]]:
    """(namespace, name, interface) of each attachment, interfaces named as Multus names them."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(NETWORKS_ANNOTATION)
    parsed = networks.parse(value)
    return [
        (a.namespace or namespace, a.name, iface)
        for a, iface in zip(parsed.attachments, parsed.interfaces(), strict=True)
    ]


# --- containers ----------------------------------------------------------------------------------


@dataclass
class LocalPod:
    name: str
    namespace: str
    spec: dict
    netns: str = ""
    interfaces: dict[str, str] = field(default_factory=dict)  # interface -> address
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)  # container -> process
    restarts: dict[str, int] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    init_done: int = 0  # init containers that have completed, in order
    started_at: dict[str, float] = field(default_factory=dict)  # container -> its running instance's start
    last_exit: dict[str, tuple[int, float, float]] = field(default_factory=dict)  # code, start, end
    restart_at: dict[str, float] = field(default_factory=dict)  # container -> when back-off ends
    backoffs: dict[str, CrashLoopBackOff] = field(default_factory=dict)

    @property
    def ip(self) -> str:
        return self.interfaces.get("eth0", "127.0.0.1")

    @property
    def hostname(self) -> str:
        """The pod's host name: spec.hostname, else its name (what the kubelet sets)."""
        return str(self.spec["spec"].get("hostname") or self.name)

    @property
    def dns_names(self) -> list[str]:
        """The names other pods reach it at: its name, and <hostname>.<subdomain> under a headless Service."""
        names = [self.name]
        sub = self.spec["spec"].get("subdomain")
        if sub:
            names += [f"{self.hostname}.{sub}", f"{self.hostname}.{sub}.{self.namespace}.svc.cluster.local"]
        return names

    @property
    def init_containers(self) -> list[dict]:
        return list(self.spec["spec"].get("initContainers") or [])

    @property
    def finished(self) -> bool:
        """Every container has exited for good (no restart pending): see LocalCluster.poll."""
        names = [c["name"] for c in self.spec["spec"]["containers"]]
        failed_init = any(self.exit_codes.get(c["name"], 0) != 0 for c in self.init_containers)
        return failed_init or (bool(self.processes) and all(n in self.exit_codes for n in names))


class LocalCluster:
    def __init__(
        self,
        workdir: Path,
        nads: list[dict],
        entrypoints: dict[str, list[str]],  # image repository (docker.io/library/... form) -> command
        isolate: bool | None = None,
        max_restarts: int | None = 3,
        base_env: dict[str, str] | None = None,
        crashloop: bool = False,
    ) -> None:
        self.workdir = workdir
        self.entrypoints = entrypoints
        self.max_restarts = max_restarts
        self.crashloop = crashloop
        self.base_env = base_env or {}
        available, why = isolation_available() if isolate in (None, True) else (False, "asked not to isolate")
        if isolate and not available:
            raise UserError(f"pods cannot be isolated in network namespaces: {why}")
        self.isolated = available
        self.why_not_isolated = why
        self.id = secrets.token_hex(2)
        self.pods: dict[str, LocalPod] = {}
        self.networks = {(n.namespace, n.name): n for n in (Network.from_nad(d) for d in nads)}
        self._made: dict[str, list[str]] = {"netns": [], "links": [], "etc": []}
        self._cluster_pool = (CLUSTER_CIDR.network_address + n for n in range(2, 254))
        self._made_pods = 0
        self._previous_handlers: dict[int, object] = {}
        if self.isolated:
            sweep_stale()
            self._write_state()
            self.cluster_bridge = self._bridge("c")
            for i, net in enumerate(self.networks.values()):
                net.bridge = self._bridge(f"n{i}")
        with contextlib.suppress(ValueError):  # only the main thread may set handlers
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)

    # -- bookkeeping, so that nothing is left behind

    @property
    def _state_file(self) -> Path:
        return STATE_DIR / f"{self.id}.json"

    def _write_state(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self._state_file.write_text(json.dumps({"pid": os.getpid(), **self._made}))

    def _record(self, kind: str, name: str) -> None:
        self._made[kind].append(name)
        self._write_state()

    def _bridge(self, suffix: str) -> str:
        name = f"ty{self.id}{suffix}"
        _ip("link", "add", name, "type", "bridge")
        self._record("links", name)
        _ip("link", "set", name, "up")
        return name

    def _on_signal(self, sig: int, frame: object) -> None:
        self.close()
        previous = self._previous_handlers.get(sig)
        signal.signal(sig, previous if callable(previous) else signal.SIG_DFL)
        if callable(previous):  # the program's own (Ctrl-C's KeyboardInterrupt, the CLI's Terminated)
            previous(sig, frame)
        raise KeyboardInterrupt if sig == signal.SIGINT else SystemExit(128 + sig)

    # -- pods

    def add_pods(self, pods: list[dict], namespace: str) -> list[LocalPod]:
        """Create the pods' namespaces, interfaces and hosts files (nothing runs yet)."""
        created = []
        for spec in pods:
            name = spec["metadata"].get("name")
            if not name:
                raise UserError("a pod has no metadata.name: the API server names pods (generateName) before they run")
            gates = spec["spec"].get("schedulingGates")
            if gates:
                raise UserError(
                    f"pod {name}: scheduling gates {[g.get('name') for g in gates]} are still on: no scheduler binds it"
                )
            for c in spec["spec"].get("initContainers") or []:
                if c.get("restartPolicy") == "Always":
                    raise UserError(f"pod {name}: init container {c['name']} is a sidecar; they are not run locally")
            pod = LocalPod(name=name, namespace=spec["metadata"].get("namespace") or namespace, spec=spec)
            if self.isolated:
                self._network(pod)
            self.pods[name] = pod
            created.append(pod)
        self._write_hosts()
        return created

    def _write_hosts(self) -> None:
        """Every pod's hosts file and the DNS shim: each name at the address of the newest pod that
        has it. A JobSet pod recreated under its old hostname (a restarted or requeued job) answers
        for it at once, as its headless Service's endpoints drop a terminating pod."""
        names: dict[str, str] = {}
        for p in self.pods.values():  # in the order they were added: the newest last, and kept
            names.update(dict.fromkeys(p.dns_names, p.ip))
        by_ip: dict[str, list[str]] = {}
        for name, ip in names.items():
            by_ip.setdefault(ip, []).append(name)
        hosts = "127.0.0.1 localhost\n" + "".join(f"{ip} {' '.join(n)}\n" for ip, n in by_ip.items())
        self._dns_shim(hosts)
        if self.isolated:
            for p in self.pods.values():
                etc = Path("/etc/netns") / p.netns
                etc.mkdir(parents=True, exist_ok=True)
                # and its own hostname, as the kubelet's /etc/hosts of a pod has it
                own = f"{p.ip} {p.hostname}\n" if names.get(p.hostname) != p.ip else ""
                (etc / "hosts").write_text(hosts + own)

    def _dns_shim(self, hosts: str) -> None:
        """``nslookup NAME`` that succeeds when NAME is a pod's name, as cluster DNS would."""
        shim = self.workdir / "dns"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "hosts").write_text(hosts)
        script = shim / "bin" / "nslookup"
        script.parent.mkdir(exist_ok=True)
        script.write_text(
            "#!/bin/sh\n# the sandbox's cluster DNS: the names of its pods (localpods.py)\n"
            f'awk -v n="$1" \'{{for (i = 2; i <= NF; i++) if ($i == n) {{print n " has address " $1; f = 1}}}} '
            f"END {{exit !f}}' {shlex.quote(str(shim / 'hosts'))}\n"
        )
        script.chmod(0o755)

    def _network(self, pod: LocalPod) -> None:
        # never reused: a removed pod's links may linger a moment, and a kubelet adds pods for ever
        index = self._made_pods
        self._made_pods += 1
        pod.netns = f"ty-{self.id}-{index}-{pod.name}"[:60]
        _ip("netns", "add", pod.netns)
        self._record("netns", pod.netns)
        self._record("etc", pod.netns)
        _ip("-n", pod.netns, "link", "set", "lo", "up")
        self._veth(pod, f"ty{self.id}p{index}c", "eth0", self.cluster_bridge, next(self._cluster_pool), CLUSTER_CIDR)
        for k, (ns, name, iface) in enumerate(_attachments(pod.spec, pod.namespace)):
            net = self.networks.get((ns, name))
            if net is None:
                known = ", ".join(f"{n}/{m}" for n, m in self.networks) or "none"
                raise UserError(
                    f"pod {pod.name}: cannot find a network-attachment-definition ({name}) in namespace ({ns}); "
                    f"known: {known}"
                )
            try:
                address = next(net.pool)
            except StopIteration:
                raise UserError(f"network {ns}/{name}: no address left in its IPAM range") from None
            self._veth(pod, f"ty{self.id}p{index}n{k}", iface, net.bridge, address, net.subnet)

    def host_on_pod_network(self, name: str) -> str:
        """A network namespace with ``eth0`` on the cluster bridge and no process: where a pod of
        the monitoring stack would open its connections from (trainyard.sandbox.monitoring).
        Removed with the rest by :meth:`close`."""
        if not self.isolated:
            raise UserError("the pod network needs network namespaces (root and ip netns)")
        host = LocalPod(name=name, namespace="monitoring", spec={"metadata": {"name": name}, "spec": {}})
        self._network(host)
        return host.netns

    def _veth(self, pod: LocalPod, host: str, inside: str, bridge: str, address, subnet) -> None:
        peer = f"{host}x"
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        self._record("links", host)
        _ip("link", "set", peer, "netns", pod.netns)
        _ip("-n", pod.netns, "link", "set", peer, "name", inside)
        _ip("-n", pod.netns, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", inside)
        _ip("-n", pod.netns, "link", "set", inside, "up")
        _ip("link", "set", host, "master", bridge)
        _ip("link", "set", host, "up")
        pod.interfaces[inside] = str(address)

    # -- containers

    def _volumes(self, pod: LocalPod, container: dict) -> tuple[dict[str, Path], int | None]:
        """Mount path -> host directory, and the /dev/shm tmpfs size when one is asked for."""
        volumes = {v["name"]: v for v in pod.spec["spec"].get("volumes") or []}
        paths: dict[str, Path] = {}
        shm = None
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise UserError(f"pod {pod.name}: volumeMount {mount['name']} names no volume")
            path = mount["mountPath"].rstrip("/") or "/"
            empty_dir = volume.get("emptyDir")
            if path == SHM_PATH and isinstance(empty_dir, dict) and empty_dir.get("medium") == "Memory":
                shm = int(parse_quantity(empty_dir.get("sizeLimit") or "64Mi"))
                continue
            if "persistentVolumeClaim" in volume:
                host = self.workdir / "pvc" / volume["persistentVolumeClaim"]["claimName"]
            elif "emptyDir" in volume or "projected" in volume:
                # projected: the service-account token volume kube-apiserver adds to every pod;
                # a kubelet (trainyard.sandbox.kubelet) writes its files before the pod starts
                host = self.workdir / "pods" / pod.name / mount["name"]
            else:
                kind = next((k for k in volume if k != "name"), "unknown")
                raise UserError(f"pod {pod.name}: volume {mount['name']} of type {kind} is not supported locally")
            host.mkdir(parents=True, exist_ok=True)
            paths[path] = host
        return paths, shm

    def _env(self, pod: LocalPod, container: dict) -> dict[str, str]:
        env: dict[str, str] = {}
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = expand(str(e.get("value") or ""), env)
                continue
            ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            values = {"metadata.name": pod.name, "metadata.namespace": pod.namespace, "status.podIP": pod.ip}
            subscript = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", str(ref))
            if subscript:  # the downward API's metadata.labels['k'] / metadata.annotations['k']
                env[e["name"]] = str((pod.spec["metadata"].get(subscript.group(1)) or {}).get(subscript.group(2), ""))
                continue
            if ref not in values:
                raise UserError(
                    f"pod {pod.name}: env {e['name']}: only fieldRef {sorted(values)}, metadata.labels['k'] and "
                    "metadata.annotations['k'] are supported locally"
                )
            env[e["name"]] = values[ref]
        return env

    def start(self, pod: LocalPod) -> None:
        """Start the pod: its first init container, or its containers when it has none (poll
        starts what comes next as each init container completes)."""
        if pod.init_containers:
            self._start_container(pod, pod.init_containers[0])
        else:
            self._start_main(pod)

    def _start_main(self, pod: LocalPod) -> None:
        for container in pod.spec["spec"]["containers"]:
            self._start_container(pod, container)

    def _process(self, pod: LocalPod, container: dict, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        """``argv`` and the environment as the container sees them: ``$(VAR)`` expanded from the
        container's env, mount paths mapped to their host directories."""
        env = self._env(pod, container)
        argv = [expand(a, env) for a in argv]
        mounts, _ = self._volumes(pod, container)

        def remap(text: str) -> str:
            for path, host in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
                text = re.sub(rf"(?<![\w/.-]){re.escape(path)}(?=/|$|[^\w.-])", str(host), text)
            return text

        argv = [remap(a) for a in argv]
        env = {k: remap(v) for k, v in env.items()}
        full_env = {**self.base_env, **env, "HOSTNAME": pod.hostname}
        full_env["PATH"] = f"{self.workdir / 'dns' / 'bin'}:{full_env.get('PATH', os.defpath)}"
        if not self.isolated:
            # one machine, one loopback: the pods' names and fabric interface are 127.0.0.1 and lo
            names = {n for p in self.pods.values() for n in p.dns_names}
            full_env.update({k: "127.0.0.1" for k, v in env.items() if v in names})
            for key in (SOCKET_IFNAME, GLOO_SOCKET_IFNAME):
                if key in full_env:
                    full_env[key] = "lo"
        return argv, full_env

    def _start_container(self, pod: LocalPod, container: dict) -> None:
        name = container["name"]
        ref = parse_image(container.get("image", ""))
        repository = ref.repository if ref else container.get("image", "")
        command = container.get("command") or self.entrypoints.get(repository)
        if not command:
            raise UserError(f"pod {pod.name}: container {name}: no command and no local entrypoint for {repository!r}")
        argv, full_env = self._process(pod, container, [*command, *(container.get("args") or [])])
        _, shm = self._volumes(pod, container)
        log = self.workdir / "logs" / f"{pod.name}.{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        pod.logs[name] = log
        if self.isolated:
            # the pod's own UTS namespace with its hostname, as a container runtime gives it:
            # torchrun resolves gethostname() to decide whether it hosts the c10d store
            setup = 'hostname "$1" && shift && '
            setup += 'mount -t tmpfs -o "size=$0" tmpfs /dev/shm && exec "$@"' if shm else 'exec "$@"'
            argv = ["ip", "netns", "exec", pod.netns, "unshare", "--uts", "--", "sh", "-c", setup, str(shm or 0),
                    pod.hostname, *argv]  # fmt: skip
        with open(log, "ab") as out:
            out.write(f"--- start {time.strftime('%H:%M:%S')}: {' '.join(argv)}\n".encode())
            out.flush()
            pod.processes[name] = subprocess.Popen(
                argv, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        pod.restarts.setdefault(name, 0)
        pod.started_at[name] = time.time()

    def exec(self, pod: LocalPod, container: str, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``argv`` inside a running container, as ``kubectl exec`` does: in the network and mount
        namespaces of its process (so it sees the pod's interfaces and its /dev/shm), with its env."""
        spec = next((c for c in pod.spec["spec"]["containers"] if c["name"] == container), None)
        proc = pod.processes.get(container)
        if spec is None or proc is None or proc.poll() is not None:
            raise UserError(f"pod {pod.name}: container {container} is not running")
        argv, env = self._process(pod, spec, argv)
        if self.isolated:
            argv = ["nsenter", "--target", str(proc.pid), "--mount", "--net", "--uts", "--", *argv]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)

    def poll(self) -> list[str]:
        """Advance init containers, restart failed containers as restartPolicy OnFailure does;
        return what happened."""
        events = []
        for pod in self.pods.values():
            events += self._due_restarts(pod)
            policy = pod.spec["spec"].get("restartPolicy", "Always")
            if pod.init_done < len(pod.init_containers):
                events += self._poll_init(pod, policy)
                continue
            for container in pod.spec["spec"]["containers"]:
                name = container["name"]
                proc = pod.processes.get(name)
                if proc is None or proc.poll() is None or name in pod.exit_codes or name in pod.restart_at:
                    continue
                again = self._exited(pod, container, proc.returncode, policy != "Never")
                events.append(f"{pod.name}/{name} exited with {proc.returncode}{again}")
        return events

    def _exited(self, pod: LocalPod, container: dict, code: int, restartable: bool) -> str:
        """Record an exit; start the container again (now, or when its back-off ends) or keep its
        exit code for good. Returns what happens next, for the event."""
        name = container["name"]
        now = time.time()
        pod.last_exit[name] = (code, pod.started_at.get(name, now), now)
        if code == 0 or not restartable or (self.max_restarts is not None and pod.restarts[name] >= self.max_restarts):
            pod.exit_codes[name] = code
            return ""
        at = pod.backoffs.setdefault(name, CrashLoopBackOff()).restart_at(now) if self.crashloop else now
        if at > now:
            pod.restart_at[name] = at
            return f"; back-off {at - now:.0f} s before restarting it"
        self._restart(pod, container)
        return f"; restarting ({pod.restarts[name]})"

    def _restart(self, pod: LocalPod, container: dict) -> None:
        pod.restart_at.pop(container["name"], None)
        pod.restarts[container["name"]] += 1
        self._start_container(pod, container)

    def _due_restarts(self, pod: LocalPod) -> list[str]:
        """Start the containers whose back-off has ended."""
        now = time.time()
        events = []
        for container in [*pod.init_containers, *pod.spec["spec"]["containers"]]:
            name = container["name"]
            at = pod.restart_at.get(name)
            if at is not None and at <= now:
                self._restart(pod, container)
                events.append(f"{pod.name}/{name} restarted after its back-off ({pod.restarts[name]})")
        return events

    def _poll_init(self, pod: LocalPod, policy: str) -> list[str]:
        """The running init container: on success the next one (or the containers) starts; on
        failure it is started again, unless the pod's restartPolicy is Never (the pod fails)."""
        container = pod.init_containers[pod.init_done]
        name = container["name"]
        proc = pod.processes.get(name)
        if proc is None or proc.poll() is None or name in pod.exit_codes or name in pod.restart_at:
            return []
        code = proc.returncode
        again = self._exited(pod, container, code, policy != "Never")
        if code == 0:
            pod.init_done += 1
            if pod.init_done < len(pod.init_containers):
                self._start_container(pod, pod.init_containers[pod.init_done])
            else:
                self._start_main(pod)
            return [f"{pod.name}/{name} (init) completed"]
        return [f"{pod.name}/{name} (init) exited with {code}{again or '; the pod fails'}"]

    def host_path(self, pod: LocalPod, path: str) -> Path | None:
        """Where ``path`` inside the pod's first container lives on this machine (its volume)."""
        mounts, _ = self._volumes(pod, pod.spec["spec"]["containers"][0])
        for mount, host in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return host / path[len(mount) :].lstrip("/")
        return None

    def counters(self, pod: LocalPod) -> dict[str, dict[str, int]]:
        """Bytes received and sent per interface of the pod (its namespace's counters)."""
        if not self.isolated:
            return {}
        out = json.loads(_ip("-j", "-s", "-n", pod.netns, "link", "show").stdout)
        return {
            link["ifname"]: {"rx": link["stats64"]["rx"]["bytes"], "tx": link["stats64"]["tx"]["bytes"]}
            for link in out
            if link["ifname"] != "lo"
        }

    def pids(self, pod: LocalPod) -> list[int]:
        """Every process of the pod: its containers' processes and all their descendants (torchrun
        starts its workers in sessions of their own, so process groups are not enough)."""
        return descendants({p.pid for p in pod.processes.values() if p.poll() is None})

    def remove_pod(self, name: str, grace: float = 10.0) -> None:
        """Stop the pod's containers as :meth:`stop_pods` does and delete its network namespace."""
        pod = self.pods.pop(name, None)
        if pod is None:
            return
        self._stop([p for p in pod.processes.values() if p.poll() is None], grace)
        for proc in pod.processes.values():
            proc.wait()
        if pod.netns:
            _remove({"netns": [pod.netns], "etc": [pod.netns]})
        self._write_hosts()  # its names no longer answer

    # -- teardown

    def stop_pods(self, grace: float = 10.0) -> None:
        """SIGTERM each container (as the kubelet does), then SIGKILL whatever is left."""
        self._stop([p for pod in self.pods.values() for p in pod.processes.values() if p.poll() is None], grace)
        for pod in self.pods.values():
            for proc in pod.processes.values():
                proc.wait()

    def _stop(self, live: list[subprocess.Popen], grace: float) -> None:
        family = set(descendants({p.pid for p in live}))
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for pid in family | set(descendants({p.pid for p in live})):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Remove everything this cluster made. Safe to call twice."""
        self.stop_pods()
        _remove(self._made)
        self._made = {"netns": [], "links": [], "etc": []}
        with contextlib.suppress(FileNotFoundError):
            self._state_file.unlink()
        for sig, handler in self._previous_handlers.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous_handlers = {}

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove(made: dict[str, list[str]]) -> None:
    for ns in made.get("netns", []):
        # processes still in the namespace keep it alive: kill them first
        pids = _ip("netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", ns, check=False)
    for link in made.get("links", []):
        _ip("link", "del", link, check=False)
    for ns in made.get("etc", []):
        shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)


def sweep_stale() -> list[str]:
    """Remove what earlier runs that died without cleaning up (SIGKILL) left behind."""
    swept = []
    if not STATE_DIR.is_dir():
        return swept
    for state in STATE_DIR.glob("*.json"):
        try:
            made = json.loads(state.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if Path(f"/proc/{made.get('pid')}").exists():
            continue
        _remove(made)
        state.unlink(missing_ok=True)
        swept.append(state.stem)
    return swept
