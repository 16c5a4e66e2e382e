"""A small client of the Kubernetes API: discovery, create, server-side apply, dry runs.

Just what syncing a repository and creating pods need, over one keep-alive HTTPS connection with
the admin's client certificate. Errors keep kube-apiserver's own Status (reason, message, the
field of each cause) so callers can point at the line of the file that caused them.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from trainyard.cluster.processes import wait_for
from trainyard.contract.k8s import LAST_APPLIED_ANNOTATION as LAST_APPLIED

# What kubectl apply (and so Argo CD's client-side apply) records on the object
# (k8s.io/kubectl@v0.36.5:pkg/cmd/apply, corev1.LastAppliedConfigAnnotation).
# An unknown or duplicate field is an error, not a warning: kubectl's default (--validate=strict),
# and so Argo CD's unless an Application sets Validate=false.
STRICT = {"fieldValidation": "Strict"}


@dataclass
class Cause:
    field: str
    message: str


@dataclass
class ApiError(Exception):
    """kube-apiserver refused a request; ``message`` is its own."""

    code: int
    reason: str
    message: str
    causes: list[Cause] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message or f"HTTP {self.code} {self.reason}"

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        try:
            status = response.json()
        except ValueError:
            return cls(response.status_code, "", response.text[:500])
        details = status.get("details") or {}
        causes = [Cause(str(c.get("field", "")), str(c.get("message", ""))) for c in details.get("causes") or []]
        return cls(response.status_code, str(status.get("reason", "")), str(status.get("message", "")), causes)


@dataclass(frozen=True)
class Resource:
    plural: str
    namespaced: bool


def group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class Kube:
    """The API at ``server``, over ``context`` (the cluster's CA and a client certificate:
    ``Pki.client_context``)."""

    def __init__(self, server: str, context: ssl.SSLContext, timeout: float = 30.0) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server, verify=context, timeout=timeout)
        self._resources: dict[tuple[str, str, str], Resource] = {}

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- raw requests ------------------------------------------------------------------------
    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.RemoteProtocolError:
            # a kept-alive connection the server closed while idle (Go's IdleTimeout): the request
            # never reached it, so it is sent once more on a new connection
            response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response.json() if response.content else None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    # --- discovery ---------------------------------------------------------------------------
    def discover(self, groups: Iterable[str] | None = None) -> None:
        """Learn the resources of every served group version (or of ``groups`` only)."""
        wanted = set(groups) if groups is not None else None
        versions: list[str] = []
        if wanted is None or "" in wanted:
            versions += [f"/api/{v}" for v in self.get("/api")["versions"]]
        for group in self.get("/apis")["groups"]:
            if wanted is None or group["name"] in wanted:
                versions += [f"/apis/{v['groupVersion']}" for v in group["versions"]]
        for path in versions:
            listing = self.get(path)
            group, version = group_version(listing["groupVersion"])
            for r in listing["resources"]:
                if "/" not in r["name"]:  # subresources (pods/status) are not kinds of their own
                    self._resources[(group, version, r["kind"])] = Resource(r["name"], r["namespaced"])

    def resource(self, api_version: str, kind: str) -> Resource:
        group, version = group_version(api_version)
        key = (group, version, kind)
        if key not in self._resources:
            self.discover([group])
        if key not in self._resources:
            raise ApiError(404, "NotFound", f"the server does not serve {kind} in {api_version}")
        return self._resources[key]

    def path(self, obj: dict, *, named: bool = True, namespace: str | None = None) -> str:
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        r = self.resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        meta = obj.get("metadata") or {}
        if r.namespaced:
            base += f"/namespaces/{namespace or meta.get('namespace') or 'default'}"
        base += f"/{r.plural}"
        return f"{base}/{meta['name']}" if named else base

    # --- writes ------------------------------------------------------------------------------
    def create(
        self, obj: dict, *, dry_run: bool = False, namespace: str | None = None, headers: dict | None = None
    ) -> dict:
        params = {**STRICT, "dryRun": "All"} if dry_run else STRICT
        return self.request(
            "POST", self.path(obj, named=False, namespace=namespace), json=obj, params=params, headers=headers
        )

    def create_if_absent(self, obj: dict) -> None:
        """Create ``obj`` unless an object of its name is there already."""
        try:
            self.create(obj)
        except ApiError as exc:
            if exc.reason != "AlreadyExists":
                raise

    def apply(self, obj: dict, *, manager: str, dry_run: bool = False, force: bool = True) -> dict:
        """Server-side apply as ``manager``."""
        params = {**STRICT, "fieldManager": manager, "force": "true" if force else "false"}
        if dry_run:
            params["dryRun"] = "All"
        return self.request(
            "PATCH",
            self.path(obj),
            content=json.dumps(obj),
            params=params,
            headers={"Content-Type": "application/apply-patch+yaml"},
        )

    def client_side_apply(self, obj: dict, *, dry_run: bool = False) -> dict:
        """What ``kubectl apply`` does to an object that does not exist yet: create it with the
        applied configuration recorded in an annotation. An existing object gets a merge patch of
        the applied fields (kubectl's three-way patch also removes fields dropped since the last
        apply; a local cluster is synced once, onto an empty store)."""
        body = json.loads(json.dumps(obj))
        annotations = body.setdefault("metadata", {}).setdefault("annotations", {}) or {}
        body["metadata"]["annotations"] = annotations
        annotations[LAST_APPLIED] = json.dumps(obj, separators=(",", ":"), sort_keys=True) + "\n"
        try:
            return self.create(body, dry_run=dry_run)
        except ApiError as exc:
            if exc.reason != "AlreadyExists":
                raise
        params = {**STRICT, "dryRun": "All"} if dry_run else STRICT
        return self.request(
            "PATCH",
            self.path(body),
            content=json.dumps(body),
            params=params,
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def delete(self, obj: dict, *, missing_ok: bool = True) -> None:
        try:
            self.request("DELETE", self.path(obj))
        except ApiError as exc:
            if not (missing_ok and exc.code == 404):
                raise

    # --- waiting -----------------------------------------------------------------------------
    def _lists(self, group: str, version: str, kind: str) -> bool:
        plural = self._resources[(group, version, kind)].plural
        response = self.http.get(f"/apis/{group}/{version}/{plural}", params={"limit": "1"})
        return response.status_code == 200

    def wait_service_account(self, namespace: str, name: str = "default", timeout: float = 30.0) -> None:
        """Wait for ``namespace``'s ServiceAccount ``name``: pods need it, and kube-controller-manager
        makes the ``default`` one a moment after the namespace."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
        wait_for(lambda: self.http.get(path).status_code == 200, timeout=timeout, what=path, interval=0.1)

    def wait_served(self, crds: list[dict], timeout: float = 30.0) -> None:
        """Wait until each of ``crds`` is Established, discovery lists every served version and
        their storage answers: an Established CRD reaches the discovery document a moment later,
        and its storage initialises for about two seconds more ("storage is (re)initializing"),
        for all of them at once; waiting here spares the first object of each kind that wait in
        turn."""
        pending = {crd["metadata"]["name"] for crd in crds}
        wanted = {
            (crd["spec"]["group"], v["name"], crd["spec"]["names"]["kind"])
            for crd in crds
            for v in crd["spec"]["versions"]
            if v.get("served", True)
        }
        missing = set(wanted)

        def established() -> bool:
            for name in sorted(pending):
                crd = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                if conditions.get("Established") == "True":
                    pending.discard(name)
            return not pending

        def served() -> bool:
            nonlocal missing
            self.discover({group for group, _, _ in wanted})
            missing = (wanted - self._resources.keys()) or {key for key in wanted if not self._lists(*key)}
            return not missing

        try:
            wait_for(established, timeout=timeout, what="CRDs established", interval=0.1)
        except TimeoutError:
            raise TimeoutError(f"CRDs not established after {timeout:g} s: {', '.join(sorted(pending))}") from None
        try:
            wait_for(served, timeout=timeout, what="CRDs served", interval=0.1)
        except TimeoutError:
            listed = ", ".join(f"{k} {g}/{v}" for g, v, k in sorted(missing))
            raise TimeoutError(f"not in discovery after {timeout:g} s: {listed}") from None
