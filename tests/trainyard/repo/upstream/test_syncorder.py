"""Argo CD's sync order (trainyard.repo.upstream.syncorder), on the test tables of argo-cd@v3.6.2
(gitops-engine/v3 pkg/sync and controller/hook_test.go), plus fuzzing of the annotation parsing
with hostile strings. Go's strconv.Atoi, which reads the waves, is tested in
tests/trainyard/repo/model/test_rendered.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.repo.model.rendered import Resource, sync_wave
from trainyard.repo.upstream import applications, syncorder
from trainyard.repo.upstream.syncorder import (
    Task,
    annotation_csvs,
    has_option,
    hook_types,
    is_hook,
    sort_tasks,
    sync_phases,
    wave,
)

INT64_MAX, INT64_MIN = (1 << 63) - 1, -(1 << 63)


PREFIXES = {"argocd": "argocd.argoproj.io", "helm_sh": "helm.sh"}


def obj(kind: str = "Pod", name: str = "", *, api: str = "v1", namespace: str | None = None, **annotations) -> Resource:
    """An object; ``argocd__sync_wave="1"`` is the annotation argocd.argoproj.io/sync-wave."""
    metadata: dict = {"name": name} if name else {}
    if namespace:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = {
            f"{PREFIXES[k.split('__')[0]]}/{k.split('__')[1].replace('_', '-')}": v for k, v in annotations.items()
        }
    return Resource(doc={"apiVersion": api, "kind": kind, "metadata": metadata}, origin=f"{kind}-{name}.yaml")


HOOK = "argocd.argoproj.io/hook"
HELM = "helm.sh/hook"


def hook(value: str) -> dict[str, str]:
    return {HOOK: value}


# --- syncwaves/waves_test.go TestWave, hook/helm/weight_test.go TestWeight, and the fallbacks --------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, 0),  # TestWave: NewPod
        ({"argocd.argoproj.io/sync-wave": "1"}, 1),
        ({"helm.sh/hook-weight": "1"}, 1),  # TestWave and TestWeight: the Helm weight is the wave
        # waves.go: Atoi's error on the sync wave falls back to the Helm weight, then to 0
        ({"argocd.argoproj.io/sync-wave": " 1"}, 0),
        ({"argocd.argoproj.io/sync-wave": "+1"}, 1),
        ({"argocd.argoproj.io/sync-wave": "1.5", "helm.sh/hook-weight": "-5"}, -5),
        ({"argocd.argoproj.io/sync-wave": "", "helm.sh/hook-weight": "3"}, 3),
        ({"argocd.argoproj.io/sync-wave": "2", "helm.sh/hook-weight": "3"}, 2),
        ({"argocd.argoproj.io/sync-wave": "-0"}, 0),
        ({"argocd.argoproj.io/sync-wave": "99999999999999999999"}, 0),
        ({"helm.sh/hook-weight": "x"}, 0),
    ],
)
def test_wave(annotations, expected):
    assert wave(annotations) == expected
    assert sync_wave({"metadata": {"annotations": annotations}}) == expected


@pytest.mark.parametrize(
    "metadata",
    [{}, {"annotations": None}, {"annotations": "x"}, {"annotations": {"argocd.argoproj.io/sync-wave": 3}}],
)
def test_a_wave_that_is_no_string_is_read_as_go_reads_it(metadata):
    # unstructured.GetAnnotations drops every annotation when one value is not a string
    assert sync_wave({"metadata": metadata}) == 0


# --- pkg/sync/resource/annotations_test.go ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "asked", "values", "has"),
    [
        (None, "bar", [], False),  # Nil
        ("", "bar", [], False),  # Empty
        ("bar", "bar", ["bar"], True),  # Single
        ("bar,bar", "bar", ["bar"], True),  # DeDup
        ("bar,baz", "baz", ["bar", "baz"], True),  # Double
        ("bar ", "bar", ["bar"], True),  # Spaces
    ],
)
def test_annotation_csvs(value, asked, values, has):
    assert annotation_csvs(value) == values
    options = {"argocd.argoproj.io/sync-options": value} if value is not None else {}
    assert has_option(options, asked) == has


def test_trim_is_go_strings_trimspace():
    # Go trims Unicode White_Space; Python's strip also takes \x1c-\x1f, which Go keeps
    assert annotation_csvs("\u00a0PreSync\u3000, \x1fSync") == ["PreSync", "\x1fSync"]


# --- hook/hook_test.go, common/types_test.go, sync_phase_test.go --------------------------------


@pytest.mark.parametrize(
    ("annotations", "is_a_hook", "types", "unfollowed"),
    [
        ({}, False, [], []),  # TestNoHooks
        (hook("PreSync"), True, ["PreSync"], []),  # TestOneHook
        (hook("Sync"), True, ["Sync"], []),
        (hook("PostSync"), True, ["PostSync"], []),
        (hook("PreSync,PostSync"), True, ["PreSync", "PostSync"], []),  # TestTwoHooks
        (hook("Sync,Sync"), True, ["Sync"], []),  # TestDupHookTypes
        ({HELM: "pre-install"}, True, ["PreSync"], []),  # TestHelmHook
        ({HOOK: "Sync", HELM: "pre-install"}, True, ["Sync"], []),  # TestBothHooks
        (hook(" PreSync , PostSync "), True, ["PreSync", "PostSync"], []),
        # refused by name: types trainyard does not follow, and a hook naming no type
        (hook("SyncFail"), True, [], ["SyncFail"]),
        (hook("Skip"), True, [], ["Skip"]),
        (hook("Skip,PreSync"), True, ["PreSync"], ["Skip"]),
        (hook("Garbage"), True, [], ["Garbage"]),
        (hook("presync"), True, [], ["presync"]),  # case matters
        (hook("PostDelete"), True, [], ["PostDelete"]),
        ({HELM: "pre-delete"}, True, [], ["pre-delete"]),
        ({HOOK: "Garbage", HELM: "post-install"}, True, ["PostSync"], ["Garbage"]),
        ({HOOK: ""}, True, [], ["(none)"]),
    ],
)
def test_hooks(annotations, is_a_hook, types, unfollowed):
    assert is_hook(annotations) == is_a_hook
    assert hook_types(annotations) == types
    assert syncorder.unfollowed_hook_types(annotations) == unfollowed


@pytest.mark.parametrize(
    ("annotations", "phases"),
    [
        ({}, ["Sync"]),  # TestSyncPhaseNone
        (hook("PreSync"), ["PreSync"]),  # TestSyncPhasePreSync
        (hook("Sync"), ["Sync"]),  # TestSyncPhaseSync
        (hook("PostSync"), ["PostSync"]),  # TestSyncPhasePost
        (hook("PreSync,PostSync"), ["PreSync", "PostSync"]),  # TestSyncPhaseTwoPhases
        (hook("PostSync,PreSync"), ["PreSync", "PostSync"]),
        (hook("PreSync,PreSync"), ["PreSync"]),  # TestSyncDuplicatedPhases
        ({HELM: "pre-install,pre-upgrade"}, ["PreSync"]),
        (hook("Garbage"), []),  # refused; no task
    ],
)
def test_sync_phases(annotations, phases):
    assert sync_phases(annotations) == phases


# --- hook/helm/*_test.go -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "is_a_hook", "types"),
    [
        (None, False, []),  # TestIsHook / TestTypes: NewPod
        ("anything", True, []),  # TestIsHook
        ("crd-install", False, []),  # TestIsHook, TestTypes: not a hook
        ("pre-install", True, ["PreSync"]),  # TestTypes and TestType_HookType
        ("pre-upgrade", True, ["PreSync"]),
        ("post-upgrade", True, ["PostSync"]),
        ("post-install", True, ["PostSync"]),
        ("pre-rollback", True, []),  # TestTypes: not supported
        ("post-rollback", True, []),
        ("test-success", True, []),
        ("test-failure", True, []),
        ("crd-install,pre-install", True, ["PreSync"]),  # only the exact value crd-install is no hook
    ],
)
def test_helm_hooks(value, is_a_hook, types):
    annotations = {HELM: value} if value is not None else {}
    assert is_hook(annotations) == is_a_hook
    assert hook_types(annotations) == types


# --- sync_tasks_test.go -------------------------------------------------------------------------


def test_kind_order():  # Test_syncTasks_kindOrder
    assert syncorder.KIND_RANK["Namespace"] == -35
    assert syncorder.KIND_RANK["APIService"] == -1
    assert syncorder.KIND_RANK.get("MyCRD", 0) == 0


def _task(kind: str = "", name: str = "", phase: str = "Sync", wave: int = 0, **kw) -> Task:
    return Task(obj(kind, name, **kw), phase=phase, wave=wave, namespace=kw.get("namespace") or "")


def test_sort_sync_task():  # TestSortSyncTask
    pod, svc, pv = _task("Pod"), _task("Service"), _task("PersistentVolume")
    w1, b, a, wm1 = _task(wave=1), _task(name="b"), _task(name="a"), _task(wave=-1)
    nokind, pre, post, cm = _task(), _task(phase="PreSync"), _task(phase="PostSync"), _task("ConfigMap")
    unsorted = [pod, svc, pv, w1, b, a, wm1, nokind, pre, post, cm]  # SyncFail is refused, not sorted
    assert sort_tasks(unsorted) == [pre, wm1, cm, pv, svc, pod, nokind, a, b, w1, post]


def test_namespace_before_custom_resource():  # TestSyncNamespaceAgainstCRD
    crd, namespace = _task("Workflow"), _task("Namespace")
    assert sort_tasks([crd, namespace]) == [namespace, crd]


def test_namespace_moves_to_the_first_task_in_it():  # TestSyncTasksSort_NamespaceAndObjectInNamespace
    hook1 = _task("Job", "mySyncHookJob1", "PreSync", namespace="myNamespace1")
    hook2 = _task("Job", "mySyncHookJob2", "PreSync", namespace="myNamespace2")
    namespace1 = _task("Namespace", "myNamespace1", wave=1)
    namespace2 = _task("Namespace", "myNamespace2", wave=2)
    assert sort_tasks([hook1, hook2, namespace1, namespace2]) == [namespace1, hook1, namespace2, hook2]
    assert (namespace1.wave, namespace1.phase) == (0, "PreSync")
    assert (namespace2.wave, namespace2.phase) == (0, "PreSync")


def test_crd_moves_to_the_first_object_of_its_kind():  # TestSyncTasksSort_CRDAndCR
    cr = _task("Workflow", phase="PreSync", api="argoproj.io/v1")
    crd = Task(
        Resource(
            doc={
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "spec": {"group": "argoproj.io", "names": {"kind": "Workflow"}},
            }
        )
    )
    assert sort_tasks([cr, crd]) == [crd, cr]
    assert crd.phase == "PreSync"


def test_a_crd_whose_names_are_no_strings_is_no_dependency():
    cr = _task("Workflow", phase="PreSync", api="argoproj.io/v1")
    doc = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {"group": "argoproj.io", "names": {"kind": ["Workflow"]}},
    }
    crd = Task(Resource(doc=doc))
    assert sort_tasks([cr, crd]) == [cr, crd]


def test_steps():  # Test_syncTasks_multiStep
    single = syncorder.steps([_task(wave=-1)])
    assert [(s.phase, s.wave) for s in single] == [("Sync", -1)]
    double = syncorder.steps(sort_tasks([_task(wave=1, phase="PostSync"), _task(wave=-1, phase="PreSync")]))
    assert [(s.phase, s.wave) for s in double] == [("PreSync", -1), ("PostSync", 1)]


# --- one Application's order ---------------------------------------------------------------------


def test_an_application_in_sync_order():
    ns = obj("Namespace", "late", argocd__sync_wave="5")
    cm = obj("ConfigMap", "in-late", namespace="late")
    pre = obj("Job", "migrate", namespace="late", argocd__hook="PreSync")
    post = obj("Job", "smoke", namespace="app", helm_sh__hook="post-install", helm_sh__hook_weight="-2")
    both = obj("Pod", "check", namespace="app", argocd__hook="PreSync,PostSync")
    role = obj("ClusterRole", "reader", api="rbac.authorization.k8s.io/v1")
    resources = [cm, pre, post, both, role, ns]
    tasks = syncorder.tasks(resources, "app")
    # the Namespace moves in front of the first task in it (the PreSync Job), in its phase and wave
    assert [(t.phase, t.wave, t.name) for t in tasks] == [
        ("PreSync", 0, "check"),  # a Pod, in namespace app, before any Job
        ("PreSync", 0, "late"),
        ("PreSync", 0, "migrate"),
        ("Sync", 0, "in-late"),
        ("Sync", 0, "reader"),
        ("PostSync", -2, "smoke"),
        ("PostSync", 0, "check"),
    ]
    # a cluster-scoped object is in the destination namespace for adjustDeps (getSyncTasks)
    assert next(t for t in tasks if t.name == "reader").namespace == "app"
    # what a sync applies: each object once
    assert [r.name for r in syncorder.order(resources, "app")] == [
        "check",
        "late",
        "migrate",
        "in-late",
        "reader",
        "smoke",
    ]


def test_destination_namespace_is_moved_before_a_cluster_scoped_object():
    crd = Resource(
        doc={
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com"},
        }
    )
    ns = obj("Namespace", "app", argocd__sync_wave="1")
    assert [r.kind for r in syncorder.order([ns, crd], "app")] == ["Namespace", "CustomResourceDefinition"]
    assert [r.kind for r in syncorder.order([ns, crd], "")] == ["CustomResourceDefinition", "Namespace"]


def test_ties_are_broken_by_group_kind_and_namespace():
    a = obj("Config", "same", api="b.example.com/v1", namespace="n2")
    b = obj("Config", "same", api="a.example.com/v1", namespace="n1")
    c = obj("Config", "same", api="a.example.com/v1", namespace="n0")
    for resources in ([a, b, c], [c, b, a], [b, a, c]):
        assert syncorder.order(resources) == [c, b, a]


# --- a cluster: the root app's steps, and what is refused ----------------------------------------


def app(name: str, wave: str | None = None, path: str | None = None, **spec) -> Resource:
    metadata: dict = {"name": name, "namespace": "argocd"}
    if wave is not None:
        metadata["annotations"] = {"argocd.argoproj.io/sync-wave": wave}
    source = {"repoURL": "https://example.com/repo.git", "path": path or f"apps/{name}"}
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": metadata,
        "spec": {"source": source, "destination": {"namespace": "ns"}, **spec},
    }
    return Resource(doc=doc, origin="clusters/t/apps.yaml", app="(bootstrap)")


ARGOCD_CM = Resource(
    doc={
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": "argocd"},
        "data": {syncorder.APP_HEALTH_KEY: "return {status = 'Healthy'}"},
    },
    origin="base/argocd/kustomization.yaml",
)


def cluster(
    root: list[Resource], renders: dict[str, list[Resource]], *, upstream=(), cm=True
) -> applications.ClusterRender:
    apps = []
    for r in root:
        if r.kind == "Application":
            ar = applications.AppRender(app=applications.Application(r), resources=list(renders.get(r.name, [])))
            if r.name in upstream:
                ar.upstream = [applications.Upstream("https://example.com/up.git", "v1")]
            apps.append(ar)
    # argocd-cm with the Application health check, among the bootstrap objects
    return applications.ClusterRender(cluster="t", root=[*root, ARGOCD_CM] if cm else root, apps=apps)


def test_applications_follow_the_root_apps_order():
    project = Resource(
        doc={
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": {"name": "p", "annotations": {"argocd.argoproj.io/sync-wave": "-1"}},
        }
    )
    root = [app("zeta", "1"), app("alpha", "1"), app("first", "-1"), app("bad-wave", "1.5"), project, app("two", "2")]
    render = cluster(root, {})
    syncorder.order_cluster(render)
    assert [a.name for a in render.apps] == ["first", "bad-wave", "alpha", "zeta", "two"]
    steps = syncorder.cluster_steps(render)
    assert [(s.wave, [a.name for a in s.apps]) for s in steps] == [
        (-1, ["first"]),
        (0, ["bad-wave"]),
        (1, ["alpha", "zeta"]),
        (2, ["two"]),
    ]
    # custom kinds rank alike (kindOrder 0), so by name: Application "first" before AppProject "p"
    assert [t.kind for t in steps[0].tasks] == ["Application", "AppProject"]
    (warned,) = [p for p in render.problems if p.severity == "warning"]
    assert "'1.5' is not an integer as Go's strconv.Atoi reads it" in warned.message
    assert "wave 0" in warned.message and warned.obj == "Application argocd/bad-wave"


def test_nested_and_generated_applications_follow_their_parent():
    child = app("child", "0")
    child.app = "parent"
    appset = Resource(
        doc={
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "ApplicationSet",
            "metadata": {"name": "jobs", "annotations": {"argocd.argoproj.io/sync-wave": "3"}},
        },
        app="(bootstrap)",
    )
    root = [app("parent", "2"), app("early", "1"), appset]
    render = cluster(root, {"parent": [child]})
    child_render = applications.AppRender(app=applications.Application(child))
    generated = []
    for name, own_wave in (("job-b", "-9"), ("job-a", "-9")):
        g = app(name, own_wave)
        generated.append(applications.AppRender(app=applications.Application(g, generated_by="jobs")))
    render.apps += [child_render, *generated]
    syncorder.order_cluster(render)
    # a generated Application's own wave orders nothing: it starts when its ApplicationSet is applied
    assert [a.name for a in render.apps] == ["early", "parent", "child", "job-a", "job-b"]


def test_without_the_application_health_check_the_waves_do_not_wait():
    render = cluster([app("a", "1"), app("b", "2")], {}, cm=False)
    syncorder.order_cluster(render)
    (refused,) = render.errors()
    assert syncorder.APP_HEALTH_KEY in refused.message and "would not wait" in refused.message
    assert refused.obj == "Application argocd/b"
    one_wave = cluster([app("a", "1"), app("b", "1")], {}, cm=False)
    syncorder.order_cluster(one_wave)
    assert one_wave.errors() == []


def messages(render: applications.ClusterRender) -> list[str]:
    syncorder.order_cluster(render)
    return [f"{p.severity}: {p.obj}: {p.message}" for p in render.problems]


def test_hooks_are_refused_where_trainyard_syncs_them_and_ordered_where_it_does_not():
    mine = [obj("Job", "migrate", namespace="ns", argocd__hook="PreSync")]
    theirs = [
        obj(
            "Job",
            "check",
            namespace="ns",
            helm_sh__hook="post-install",
            helm_sh__hook_delete_policy="before-hook-creation,hook-succeeded",
        )
    ]
    render = cluster([app("mine", "1"), app("theirs", "1")], {"mine": mine, "theirs": theirs}, upstream={"theirs"})
    (refused,) = messages(render)
    assert refused.startswith("error: Job ns/migrate: Argo CD resource hook (PreSync)")
    assert "trainyard/cluster/sync.py" in refused
    assert [r.name for r in render.app("theirs").resources] == ["check"]


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"argocd.argoproj.io/hook": "SyncFail"}, "error: argocd.argoproj.io/hook 'SyncFail': hook type 'SyncFail'"),
        ({"argocd.argoproj.io/hook": "Skip"}, "hook type 'Skip' is not followed by trainyard"),
        ({"argocd.argoproj.io/hook": "PostDelete"}, "hook type 'PostDelete' is not followed"),
        ({"helm.sh/hook": "pre-delete"}, "error: helm.sh/hook 'pre-delete': hook type 'pre-delete' is not followed"),
        ({"helm.sh/hook": "test"}, "error: helm.sh/hook 'test': hook type 'test'"),
        ({"argocd.argoproj.io/hook": "Presync"}, "error: argocd.argoproj.io/hook 'Presync': hook type 'Presync'"),
        ({"argocd.argoproj.io/hook": ""}, "hook type '(none)' is not followed"),
        (
            {"argocd.argoproj.io/sync-options": "Validate=false"},
            "error: argocd.argoproj.io/sync-options Validate=false is not emulated",
        ),
        ({"argocd.argoproj.io/sync-options": "Replace=true,Validate=false"}, "sync-options Validate=false is not emul"),
        ({"argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}, "SkipDryRunOnMissingResource=t"),
        ({"argocd.argoproj.io/sync-options": "ServerSideApply=true"}, "sync-options ServerSideApply=true is not emu"),
        ({"argocd.argoproj.io/sync-options": "ServerSideApply=false"}, "sync-options ServerSideApply=false is not"),
        ({"argocd.argoproj.io/sync-options": "PruneLast=true"}, "sync-options PruneLast=true is not emulated"),
        ({"argocd.argoproj.io/sync-options": "CreateNamespace=true"}, "error: argocd.argoproj.io/sync-options 'Creat"),
        ({"argocd.argoproj.io/sync-options": "Prune=False"}, "is no sync option Argo CD reads from an object"),
    ],
)
def test_what_is_refused_or_warned(annotations, expected):
    r = Resource(
        doc={
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "x", "namespace": "ns", "annotations": annotations},
        }
    )
    render = cluster([app("up", "1")], {"up": [r]}, upstream={"up"})
    syncorder.order_cluster(render)
    found = [f"{p.severity}: {p.message}" for p in render.problems if p.obj == "Job ns/x"]
    assert any(m.startswith(expected) or expected in m for m in found), found


@pytest.mark.parametrize(
    "options",
    [
        "Prune=false,Delete=false",
        "Prune=confirm",
        "Delete=confirm",
        " Prune=false ,",
        "Force=true,Replace=true",  # docs/trainer-v2-kueue.md: how a running TrainJob is replaced
        "",
    ],
)
def test_followed_sync_options_pass(options):
    r = obj("ConfigMap", "c", namespace="ns", argocd__sync_options=options)
    assert messages(cluster([app("mine", "1")], {"mine": [r]})) == []


@pytest.mark.parametrize(
    ("options", "replace"),
    [
        ("", False),
        ("Replace=true", True),
        ("Force=true", False),
        ("Replace=false", False),
        ("Replace=true ,Force=true", True),
    ],
)
def test_replace_per_object(options, replace):
    assert syncorder.replace(obj("ConfigMap", "c", argocd__sync_options=options)) is replace


def test_waves_whose_difference_overflows_are_refused():
    low = obj("ConfigMap", "low", namespace="ns", argocd__sync_wave=str(INT64_MIN))
    high = obj("ConfigMap", "high", namespace="ns", argocd__sync_wave="1")
    (refused,) = messages(cluster([app("mine", "1")], {"mine": [low, high]}))
    assert "overflows" in refused and "ConfigMap ns/high" in refused
    fine = obj("ConfigMap", "high", namespace="ns", argocd__sync_wave="-1")
    assert messages(cluster([app("mine", "1")], {"mine": [low, fine]})) == []


@pytest.mark.parametrize("annotations", [["x"], "x", {"argocd.argoproj.io/sync-wave": 1}, {1: "x"}])
def test_annotations_that_are_no_strings_are_refused(annotations):
    r = Resource(doc={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": annotations}})
    (refused,) = messages(cluster([app("mine", "1")], {"mine": [r]}))
    assert refused.startswith("error: ConfigMap c: metadata.annotations")


def test_a_hook_without_a_name_has_no_known_place():
    r = Resource(
        doc={
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"generateName": "check-", "annotations": {"helm.sh/hook": "post-install"}},
        }
    )
    (refused,) = messages(cluster([app("up", "1")], {"up": [r]}, upstream={"up"}))
    assert "hook without metadata.name" in refused


# --- the repository's own render -----------------------------------------------------------------


def test_cert_managers_helm_hooks_run_after_the_release(report):
    ar = report.renders["dev"].app("trainyard-cert-manager")
    hooks = [r for r in ar.resources if is_hook(syncorder.annotations(r.doc))]
    assert {r.name for r in hooks} == {"cert-manager-startupapicheck", "cert-manager-startupapicheck:create-cert"}
    assert ar.resources[-len(hooks) :] == hooks  # PostSync: after every Sync-phase object
    steps = syncorder.steps(syncorder.tasks(ar.resources, "cert-manager"))
    # helm.sh/hook-weight is the wave: the RBAC (-5), then the Job (1)
    assert [(s.phase, s.wave, [t.kind for t in s.tasks]) for s in steps[1:]] == [
        ("PostSync", -5, ["ServiceAccount", "Role", "RoleBinding"]),
        ("PostSync", 1, ["Job"]),
    ]


@pytest.mark.parametrize("cluster_name", ["dev", "prod-roce", "prod-ib"])
def test_the_repository_gates_its_waves(report, cluster_name):
    render = report.renders[cluster_name]
    steps = syncorder.cluster_steps(render)
    assert [a.name for s in steps for a in s.apps] == [a.name for a in render.apps]
    assert [s.wave for s in steps] == sorted(s.wave for s in steps)
    assert len(steps) > 2 and not [p for p in render.problems if syncorder.APP_HEALTH_KEY in p.message]


# --- fuzzing ------------------------------------------------------------------------------------

HOSTILE = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=st.sampled_from(list(",Skip PreSyncPostDelete=\u00a0\ufeff\x00\x85")), max_size=80),
    st.from_regex(r"\A[ ,]*(PreSync|Sync|PostSync|SyncFail|Skip|PostDelete|pre-install|crd-install|x)?[ ,]*\Z"),
)
KEYS = st.sampled_from(
    [
        syncorder.HOOK,
        syncorder.HELM_HOOK,
        syncorder.SYNC_WAVE,
        syncorder.HELM_HOOK_WEIGHT,
        syncorder.SYNC_OPTIONS,
    ]
)


@settings(max_examples=800, deadline=None)
@given(st.dictionaries(KEYS, HOSTILE, max_size=7))
def test_annotation_parsing_never_fails(annotations):
    phases = sync_phases(annotations)
    assert phases == sorted(set(phases), key=syncorder.PHASE_ORDER.__getitem__)
    assert isinstance(wave(annotations), int)
    assert INT64_MIN <= wave(annotations) <= INT64_MAX
    if phases and is_hook(annotations):
        assert set(phases) <= set(hook_types(annotations))
    r = obj("Job", "j", namespace="ns")
    r.doc["metadata"]["annotations"] = annotations
    found = syncorder.object_problems(r, synced_here=True)
    assert all(p.where and p.message for p in found)
    assert syncorder.order([r], "ns") in ([], [r])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_csvs_are_trimmed_unique_and_without_commas(text):
    items = annotation_csvs(text)
    assert len(items) == len(set(items)) and all(i and "," not in i for i in items)
    assert annotation_csvs(",".join(items)) == items


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=10,
    )
)
def test_odd_metadata_is_refused_without_a_traceback(value):
    r = Resource(doc={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": value}})
    found = syncorder.object_problems(r, synced_here=True)
    assert isinstance(found, list)
    assert syncorder.order([r]) in ([], [r])
