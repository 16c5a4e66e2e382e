"""A job folder (overlays/<cluster>/jobs/<job>/) is untrusted input: what it may hold, checked on the
raw files before kustomize runs, so that what CI renders is what Argo CD renders, and a hostile
folder is refused quickly, naming the file and line.

What Argo CD would render differently from CI is refused (argoproj/argo-cd@v3.6.2,
reposerver/repository/repository.go and util/app/discovery/discovery.go):

- a file whose name ends in ``Chart.yaml`` (Argo CD renders such a folder with Helm:
  ``strings.HasSuffix(base, "Chart.yaml")``), ``*.jsonnet``/``*.libsonnet`` (rendered by default in a
  directory source), ``.argocd-source.yaml`` and ``.argocd-source-<app>.yaml`` (merged into the
  Application's source before the tool is chosen: they can switch the tool, add a plugin or
  kustomize settings);
- kustomization fields that run code or fetch charts: ``helmCharts``, ``helmGlobals``,
  ``helmChartInflationGenerator``, ``generators``, ``transformers``, ``validators`` (plugins);
- a folder without a kustomization (Argo CD would render its files as a plain directory).

What would reach outside the folder is refused: remote bases and URLs (kustomize fetches them, with
the repository's credentials, at render time; every entry kustomize's own rule would fetch, in every
field that names a file or folder, whether or not a local folder of that path exists:
:mod:`trainyard.repo.model.remote_refs`), absolute paths, paths and symbolic links that lead
outside the folder. The one exception is the platform's job bases, :data:`JOB_BASES` (folders under
``base/jobs/``), which a job's kustomization takes as a resource.

A file name that is not UTF-8 or holds control characters is refused (it is printed escaped), and so
is anything but regular files, folders and links: a pipe is never opened.

What is too large is refused before it is read: a file over :data:`MAX_FILE_BYTES`, a folder over
:data:`MAX_FOLDER_BYTES` or :data:`MAX_ENTRIES` entries. The YAML kustomize reads (kustomizations,
their resources and patches) is parsed with :mod:`trainyard.repo.model.rawyaml` (linear, bounded) and
every object's metadata is held to Kubernetes' limits with its line: names, label keys and values,
annotation keys and the 256 KiB annotation total. A JSON patch's operations must be well formed.

Every YAML file of the folder that kustomize reads gives each key once: a key written twice in a
mapping, or given both directly and through a ``<<`` merge, is refused with the lines of both
(:func:`trainyard.repo.model.rawyaml.duplicate_key`; a generator's YAML file only for that, its content
being data); and a kustomization's keys are written as kustomize's field names, since kustomize
matches them without regard to case (:mod:`trainyard.repo.model.kustomization_keys`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trainyard.contract.k8s import (
    ANNOTATIONS_MAX_BYTES,
    annotations_size,
    is_dns1035_label,
    is_dns1123_subdomain,
    label_value_problem,
    qualified_name_problem,
)
from trainyard.repo.model import kustomization_keys, rawyaml, remote_refs
from trainyard.repo.model.problems import Problem, error
from trainyard.repo.model.rendered import tree_copy
from trainyard.repo.model.repository import Repository, kustomization_file

# A Secret's data may hold at most 1 MiB (kubernetes/api@v0.36.5:core/v1/types.go MaxSecretSize); no
# file of a job folder, whose objects are a few KiB, needs more.
MAX_FILE_BYTES = 1024 * 1024
MAX_FOLDER_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 256
JOB_BASES = ("base/jobs",)  # folders outside a job folder that its kustomizations may use, and nothing else
YAML_SUFFIXES = (".yaml", ".yml", ".json")
PLUGIN_FIELDS = (
    "helmCharts", "helmGlobals", "helmChartInflationGenerator", "generators", "transformers", "validators",
)  # fmt: skip
PATH_LISTS = ("resources", "bases", "components", "crds", "configurations")
OPS = {"add": ("value",), "replace": ("value",), "test": ("value",), "remove": (), "move": ("from",), "copy": ("from",)}
# kinds whose name must be a DNS-1035 label (Services: ValidateServiceName; the jobs: their controllers)
DNS1035_KINDS = ("Service", "TrainJob", "PyTorchJob", "TFJob", "MPIJob")


@dataclass
class Scan:
    """What one job folder's raw files say."""

    repo: Repository
    folder: Path  # resolved
    problems: list[Problem] = field(default_factory=list)
    docs: dict[Path, list[yaml.Node]] = field(default_factory=dict)  # parsed YAML files
    kustomizations: list[Path] = field(default_factory=list)

    def rel(self, path: Path) -> str:
        """``path`` relative to the repository root, without following a link it may be; bytes that are
        not UTF-8 and control characters escaped (the name is printed)."""
        text = os.path.normpath(path)
        root = str(self.repo.root)
        return printable(os.path.relpath(text, root) if text == root or text.startswith(root + os.sep) else text)

    def err(self, path: Path, message: str, line: int = 0) -> None:
        where = self.rel(path) + (f":{line}" if line else "")
        self.problems.append(error(where, message))

    def inside(self, path: Path) -> bool:
        return path == self.folder or self.folder in path.parents

    def job_base(self, path: Path) -> bool:
        return any((self.repo.root / b) in path.parents for b in JOB_BASES)


def printable(text: str) -> str:
    """``text`` with what cannot be printed as it is (bytes of a file name that are not UTF-8, control
    characters) written as escapes."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in text)


def scan(repo: Repository, folder: Path) -> list[Problem]:
    """Every problem of the job folder ``folder``; empty when kustomize may build it."""
    if folder.is_symlink():
        return [error(repo.rel(folder), "the job folder is a symbolic link; make it a folder")]
    s = Scan(repo, folder.resolve())
    if not _walk(s):
        return s.problems
    root = kustomization_file(s.folder)
    if root is None:
        s.err(s.folder, "no kustomization.yaml: Argo CD would render the folder's YAML, JSON and Jsonnet files as a "
              "plain directory; a job folder is a kustomization (trainyard new-job writes one)")  # fmt: skip
        return s.problems
    _kustomization(s, root)
    return s.problems


def _walk(s: Scan) -> bool:
    """Names, links, kinds and sizes of every entry, without reading any file. False: too much to
    read any further."""
    entries = 0
    total = 0
    oversize = False
    pending = [s.folder]
    while pending:
        try:
            listing = os.scandir(pending.pop())
        except OSError as exc:
            s.err(Path(exc.filename or s.folder), f"cannot be listed: {exc.strerror}")
            continue
        with listing:  # stops reading a huge folder at the limit instead of listing it whole
            for entry in listing:
                entries += 1
                if entries > MAX_ENTRIES:
                    s.err(s.folder, f"more than {MAX_ENTRIES} files and folders; a job folder needs a handful")
                    return False
                path = Path(entry.path)
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    s.err(path, f"cannot be read: {exc.strerror}")
                    continue
                if stat.S_ISLNK(info.st_mode):
                    target = Path(os.path.realpath(path))
                    if not s.inside(target):
                        # argo-cd@v3.6.2:reposerver/repository/repository.go checkOutOfBoundsSymlinks refuses
                        # every Application of the repository while one leads out of it
                        escapes = os.path.isabs(os.readlink(path)) or not (
                            target == s.repo.root or s.repo.root in target.parents
                        )
                        s.err(path, f"a symbolic link to {s.rel(target)}, outside the job folder: kustomize would "
                              "read it; put the file itself in the folder" + (
                                  " (Argo CD renders no Application of the repository while it holds a link that "
                                  "is absolute or leads out of it)" if escapes else ""))  # fmt: skip
                    continue
                if stat.S_ISDIR(info.st_mode):
                    pending.append(path)
                    continue
                if not stat.S_ISREG(info.st_mode):
                    s.err(path, "not a regular file (a pipe, socket or device); remove it")
                    continue
                _name_rules(s, path)
                if info.st_size > MAX_FILE_BYTES:
                    oversize = True
                    s.err(
                        path,
                        f"{info.st_size:,} bytes, over the {MAX_FILE_BYTES:,} a file of a job folder may "
                        "have; keep data out of the repository (the datasets claim) and the job's files small",
                    )
                total += info.st_size
    if total > MAX_FOLDER_BYTES:
        if not oversize:
            s.err(s.folder, f"{total:,} bytes in all, over the {MAX_FOLDER_BYTES:,} a job folder may have")
        return False
    return True


def _name_rules(s: Scan, path: Path) -> None:
    name = path.name
    if printable(name) != name:
        s.err(path, "a file name with bytes that are not UTF-8 or with control characters: rename it")
    if name.endswith("Chart.yaml"):
        s.err(path, "Argo CD renders a folder holding a file whose name ends in Chart.yaml as a Helm chart, which "
              "trainyard does not render: rename or remove it")  # fmt: skip
    elif name.endswith((".jsonnet", ".libsonnet")):
        s.err(path, "Jsonnet: Argo CD evaluates *.jsonnet files of a directory source, which trainyard does not "
              "render: write the objects as YAML")  # fmt: skip
    elif name == ".argocd-source.yaml" or (name.startswith(".argocd-source-") and name.endswith(".yaml")):
        s.err(
            path,
            "Argo CD merges this file into the Application's source (it can change the tool, add a plugin "
            "or kustomize settings) and trainyard would not see it: remove it, put settings in kustomization.yaml",
        )


def _read(s: Scan, path: Path, *, data: bool = False) -> list[yaml.Node] | None:
    """The YAML documents of ``path``, refused (None) with a problem naming the file and line where
    they are not YAML or give a key twice. ``data``: a generator's file, whose content is the
    ConfigMap's or Secret's: only a key given twice is refused, text that is not YAML is left alone."""
    if path in s.docs:
        return s.docs[path]
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            s.err(path, "not a regular file (a folder, pipe, socket or device): kustomize cannot read it as a file")
            return None  # never opened: a pipe would block
        if info.st_size > MAX_FILE_BYTES:
            return None  # refused by its size already
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        if not data:
            s.err(path, f"not UTF-8 text (byte {exc.start}); kustomize reads YAML as UTF-8")
        return None
    except OSError as exc:
        s.err(path, f"cannot be read: {exc.strerror}")
        return None
    try:
        docs = rawyaml.compose(text)
    except rawyaml.YamlRefused as exc:
        if not data:
            s.err(path, str(exc), exc.line)
        return None
    for doc in docs:  # the merge rule of go-yaml v2 too: a kustomization and a JSON patch are read with it
        problem = rawyaml.duplicate_key(doc, merge_overrides=False)
        if problem is not None:
            s.err(path, problem[1], problem[0])
            return None
    s.docs[path] = docs
    return docs


def _kustomization(s: Scan, file: Path) -> None:
    if file in s.kustomizations:
        return
    s.kustomizations.append(file)
    docs = _read(s, file)
    if not docs:
        return
    doc, here = docs[0], file.parent
    if not isinstance(doc, yaml.MappingNode):
        s.err(file, "a kustomization is a mapping (apiVersion, kind, resources, patches...)", rawyaml.line(doc))
        return
    for line, message in kustomization_keys.problems(doc):
        s.err(file, message, line)
    for key, value in rawyaml.items(doc):
        name = rawyaml.scalar(key)
        if name in PLUGIN_FIELDS:
            s.err(file, f"{name}: kustomize plugins and Helm charts are not allowed in a job folder (Argo CD does "
                  "not run them by default, and trainyard does not render them)", rawyaml.line(key))  # fmt: skip
        elif name in PATH_LISTS:
            for entry in _seq(value):
                _reference(s, file, entry, directory_ok=name in ("resources", "bases", "components"))
        elif name in ("patches", "patchesJson6902"):
            for entry in _seq(value):
                target = rawyaml.scalar(rawyaml.get(rawyaml.get(entry, "target"), "kind"))
                path = rawyaml.get(entry, "path")
                inline = rawyaml.get(entry, "patch")
                if path is not None and _reference(s, file, path, directory_ok=False):
                    _patch_file(s, here / str(rawyaml.scalar(path)), target)
                elif rawyaml.scalar(inline) is not None:
                    _inline_patch(s, file, inline, target)
        elif name == "patchesStrategicMerge":
            for entry in _seq(value):
                text = rawyaml.scalar(entry) or ""
                if "\n" in text:
                    _inline_patch(s, file, entry, None)
                elif _reference(s, file, entry, directory_ok=False):
                    _patch_file(s, here / text, None)
        elif name in ("configMapGenerator", "secretGenerator"):
            for gen in _seq(value):
                for field_name in ("files", "envs"):
                    for entry in _seq(rawyaml.get(gen, field_name)):
                        if _reference(s, file, entry, directory_ok=False, key_value=field_name == "files"):
                            _data_file(s, file, entry, key_value=field_name == "files")
                env = rawyaml.get(gen, "env")
                if env is not None:
                    _reference(s, file, env, directory_ok=False)
        elif name == "replacements":
            for entry in _seq(value):
                if rawyaml.get(entry, "path") is not None:
                    _reference(s, file, rawyaml.get(entry, "path"), directory_ok=False)
        elif name == "openapi" and rawyaml.get(value, "path") is not None:
            _reference(s, file, rawyaml.get(value, "path"), directory_ok=False)
        elif name in ("commonLabels", "commonAnnotations"):
            _metadata_maps(s, file, {"labels" if name == "commonLabels" else "annotations": value})
        elif name == "labels":
            for entry in _seq(value):
                _metadata_maps(s, file, {"labels": rawyaml.get(entry, "pairs")})
        elif name in ("namePrefix", "nameSuffix"):
            text = rawyaml.scalar(value) or ""
            if len(text) > 63:
                s.err(
                    file, f"{name} is {len(text)} characters: every name it makes would be over 63", rawyaml.line(value)
                )


def _seq(node: yaml.Node | None) -> list[yaml.Node]:
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _reference(s: Scan, file: Path, node: yaml.Node, *, directory_ok: bool, key_value: bool = False) -> bool:
    """Whether the path ``node`` names is one the folder may use; reads the kustomizations and
    resource files it reaches inside the folder."""
    text = rawyaml.scalar(node)
    line = rawyaml.line(node)
    if text is None:
        return False
    # kustomize splits "key=path" (api@v0.21.3 internal/generators/utils.go ParseFileSource); either part counts
    for candidate in (text, text.split("=", 1)[1]) if key_value and "=" in text else (text,):
        if remote_refs.is_remote(candidate):
            what = remote_refs.describe(candidate)
            s.err(file, f"{candidate[:200]!r} is fetched from the network by kustomize (a remote base or URL: "
                  f"{what}), whether or not a local folder of that path exists: a job folder may use its own files "
                  "and the job bases under base/jobs/ only", line)  # fmt: skip
            return False
    if key_value and "=" in text:
        text = text.split("=", 1)[1]
    entry = text.strip()
    if os.path.isabs(entry):
        s.err(file, f"{entry[:200]!r} is an absolute path: use a path relative to the kustomization", line)
        return False
    target = Path(os.path.realpath(file.parent / entry))
    if not target.exists():
        s.err(file, f"{entry[:200]!r} does not exist", line)
        return False
    if not s.inside(target):
        if directory_ok and target.is_dir() and s.job_base(target):
            return True
        s.err(file, f"{entry[:200]!r} leads outside the job folder (to {s.rel(target)}): a job folder may use its "
              f"own files and the job bases under {', '.join(b + '/' for b in JOB_BASES)} only", line)  # fmt: skip
        return False
    if target.is_dir():
        if not directory_ok:
            s.err(file, f"{entry[:200]!r} is a folder; a file is expected here", line)
            return False
        inner = kustomization_file(target)
        if inner is None:
            s.err(file, f"{entry[:200]!r} is a folder without a kustomization", line)
            return False
        _kustomization(s, inner)
    elif directory_ok and target.suffix in YAML_SUFFIXES:
        docs = _read(s, target)
        for doc in docs or []:
            _object(s, target, doc)
    elif target.suffix in YAML_SUFFIXES and not key_value:
        _read(s, target)  # replacements, openapi, crds, configurations: YAML kustomize reads
    return True


def _data_file(s: Scan, file: Path, node: yaml.Node, *, key_value: bool) -> None:
    """A generator's file that is YAML (by its name): its keys given once, like every YAML of the folder."""
    text = (rawyaml.scalar(node) or "").strip()
    path = Path(os.path.realpath(file.parent / (text.split("=", 1)[1] if key_value and "=" in text else text)))
    if path.is_file() and path.suffix in YAML_SUFFIXES:
        _read(s, path, data=True)


def _patch_file(s: Scan, path: Path, target_kind: str | None) -> None:
    path = Path(os.path.realpath(path))
    docs = _read(s, path)
    for doc in docs or []:
        _patch(s, path, doc, target_kind, 0)


def _inline_patch(s: Scan, file: Path, node: yaml.Node, target_kind: str | None) -> None:
    """A patch written in the kustomization: its lines are counted from the kustomization's."""
    text = rawyaml.scalar(node) or ""
    offset = rawyaml.line(node) if getattr(node, "style", None) in ("|", ">") else rawyaml.line(node) - 1
    try:
        docs = rawyaml.load(text)
    except rawyaml.YamlRefused as exc:
        s.err(file, f"inline patch: {exc}", offset + exc.line)
        return
    for doc in docs:
        _patch(s, file, doc, target_kind, offset)


def _patch(s: Scan, file: Path, doc: yaml.Node, target_kind: str | None, offset: int) -> None:
    if isinstance(doc, yaml.MappingNode):  # a strategic merge patch: an object
        _object(s, file, doc, offset)
        return
    if not isinstance(doc, yaml.SequenceNode):
        s.err(
            file,
            "a patch is an object (strategic merge) or a list of JSON patch operations",
            offset + rawyaml.line(doc),
        )
        return
    for i, op in enumerate(doc.value):
        line = offset + rawyaml.line(op)
        kind = rawyaml.scalar(rawyaml.get(op, "op"))
        path = rawyaml.scalar(rawyaml.get(op, "path"))
        if not isinstance(op, yaml.MappingNode) or kind not in OPS:
            s.err(file, f"JSON patch operation {i}: op must be one of {', '.join(OPS)} (RFC 6902), "
                  f"not {kind!r}", line)  # fmt: skip
            continue
        if path is None or (path and not path.startswith("/")):
            s.err(file, f"JSON patch operation {i} ({kind}): path must be a JSON pointer such as /spec/trainer "
                  f"(got {path!r})", line)  # fmt: skip
            continue
        for needed in OPS[kind]:
            if rawyaml.get(op, needed) is None:
                s.err(file, f"JSON patch operation {i} ({kind} {path}): {needed} is missing", line)
        value = rawyaml.get(op, "value")
        if value is not None:
            _patch_value(s, file, path, value, target_kind, offset)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _patch_value(s: Scan, file: Path, path: str, value: yaml.Node, kind: str | None, offset: int) -> None:
    """Metadata that a JSON patch operation writes: its name, labels and annotations."""
    parts = [_unescape(p) for p in path.split("/")[1:]]
    line = offset + rawyaml.line(value)
    if parts == ["metadata", "name"]:
        _name(s, file, rawyaml.scalar(value), kind, line)
    elif parts[-1:] == ["metadata"]:
        _metadata(s, file, value, kind, offset, named=parts == ["metadata"])
    elif len(parts) >= 2 and parts[-2] == "metadata" and parts[-1] in ("labels", "annotations"):
        _metadata_maps(s, file, {parts[-1]: value}, offset)
    elif len(parts) >= 3 and parts[-3] == "metadata" and parts[-2] in ("labels", "annotations"):
        what, key, text = parts[-2][:-1], parts[-1], rawyaml.scalar(value) or ""
        problem = qualified_name_problem(key.lower() if what == "annotation" else key)
        if problem is not None:
            problem = f"{what} key {problem}"
        elif what == "label" and (vp := label_value_problem(text)):
            problem = f"label {key!r}: {vp}"
        elif what == "annotation" and len(key) + len(text.encode()) > ANNOTATIONS_MAX_BYTES:
            problem = (
                f"annotation {key!r} is {len(text.encode()):,} bytes, over Kubernetes' limit of "
                f"{ANNOTATIONS_MAX_BYTES:,} (256 KiB) for all of an object's annotations"
            )
        if problem:
            s.err(file, problem, line)
    if isinstance(value, yaml.MappingNode | yaml.SequenceNode):
        _nested_metadata(s, file, value, offset)


# Kinds of upstream examples that trainyard clusters do not run as written: what to write instead.
INSTEAD: dict[tuple[str, str], str] = {
    ("jobset.x-k8s.io", "JobSet"): (
        "a bare JobSet gets no runtime, no fabric-aware placement and no trainer contract: write a TrainJob "
        "(trainyard new-job NAME --cluster C), which Kubeflow Trainer turns into a JobSet from the cluster's runtime"
    ),
    ("batch.volcano.sh", "Job"): (
        "Volcano is not installed on trainyard clusters (Kueue queues and admits whole jobs here): write a TrainJob "
        "(trainyard new-job) or a PyTorchJob (trainyard new-job --kind pytorch)"
    ),
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): (
        "runtimes are the platform's, one per fabric, generated from policies/ (base/runtimes): name the cluster's "
        "runtime in spec.runtimeRef (trainyard-<fabric>) and put what is the job's own in the TrainJob (spec.trainer, "
        "spec.runtimePatches); see docs/bring-your-job.md"
    ),
    ("trainer.kubeflow.org", "TrainingRuntime"): (
        "runtimes are the platform's, one per fabric, generated from policies/ (base/runtimes): name the cluster's "
        "ClusterTrainingRuntime in spec.runtimeRef and put what is the job's own in the TrainJob (spec.trainer, "
        "spec.runtimePatches); see docs/bring-your-job.md"
    ),
}


def _instead(s: Scan, file: Path, doc: yaml.Node, kind: str | None, meta: yaml.Node | None, line: int) -> None:
    api = rawyaml.scalar(rawyaml.get(doc, "apiVersion")) or ""
    advice = INSTEAD.get((api.partition("/")[0], kind or ""))
    if advice:
        s.err(file, f"{kind} ({api}): {advice}", line)
    named = isinstance(meta, yaml.MappingNode) and rawyaml.get(meta, "name") is not None
    if isinstance(meta, yaml.MappingNode) and rawyaml.get(meta, "generateName") is not None and not named:
        s.err(
            file,
            "metadata.generateName without metadata.name: kustomize cannot build an object without a name and "
            "Argo CD tracks every object by its name; give it a fixed metadata.name (a new run is a new name "
            "or a new folder)",
            line,
        )


def _object(s: Scan, file: Path, doc: yaml.Node, offset: int = 0) -> None:
    kind = rawyaml.scalar(rawyaml.get(doc, "kind"))
    meta = rawyaml.get(doc, "metadata")
    _instead(s, file, doc, kind, meta, offset + rawyaml.line(doc))
    if meta is not None:
        _metadata(s, file, meta, kind, offset, named=True)
    for key in ("spec", "data", "stringData"):
        sub = rawyaml.get(doc, key)
        if isinstance(sub, yaml.MappingNode | yaml.SequenceNode):
            _nested_metadata(s, file, sub, offset)


def _nested_metadata(s: Scan, file: Path, node: yaml.Node, offset: int) -> None:
    """Pod templates and the like: every ``metadata`` mapping under ``node``."""
    for key, value in rawyaml.walk(node):
        if rawyaml.scalar(key) == "metadata" and isinstance(value, yaml.MappingNode):
            _metadata(s, file, value, None, offset, named=False)


def _metadata(s: Scan, file: Path, meta: yaml.Node, kind: str | None, offset: int, *, named: bool) -> None:
    if named:
        name = rawyaml.get(meta, "name")
        if name is not None:
            _name(s, file, rawyaml.scalar(name), kind, offset + rawyaml.line(name))
    _metadata_maps(s, file, {k: rawyaml.get(meta, k) for k in ("labels", "annotations")}, offset)


def _name(s: Scan, file: Path, name: str | None, kind: str | None, line: int) -> None:
    if name is None:
        return
    if kind in DNS1035_KINDS:
        if not is_dns1035_label(name):
            s.err(
                file,
                f"{kind} name {name[:80]!r}{'...' if len(name) > 80 else ''} ({len(name)} characters) must "
                "be a DNS-1035 label: at most 63 lower case letters, digits and '-', starting with a letter",
                line,
            )
    elif not is_dns1123_subdomain(name):
        s.err(file, f"name {name[:80]!r}{'...' if len(name) > 80 else ''} ({len(name)} characters) must be a "
              "DNS-1123 subdomain: at most 253 lower case letters, digits, '-' and '.'", line)  # fmt: skip


def _metadata_maps(s: Scan, file: Path, maps: dict[str, yaml.Node | None], offset: int = 0) -> None:
    for what, node in maps.items():
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
            continue  # kube-apiserver reads a null map as no map
        if not isinstance(node, yaml.MappingNode):
            s.err(file, f"{what} must be a mapping of strings", offset + rawyaml.line(node))
            continue
        pairs = [(rawyaml.scalar(k) or "", rawyaml.scalar(v) or "", k) for k, v in rawyaml.items(node)]
        for key, value, knode in pairs:
            line = offset + rawyaml.line(knode)
            problem = qualified_name_problem(key.lower() if what == "annotations" else key)
            if problem:
                s.err(file, f"{what[:-1]} key {problem}", line)
            elif what == "labels" and (vp := label_value_problem(value)):
                s.err(file, f"label {key!r}: {vp}", line)
        if what == "annotations":
            size = annotations_size({k: v for k, v, _ in pairs})
            if size > ANNOTATIONS_MAX_BYTES:
                s.err(
                    file,
                    f"annotations total {size:,} bytes (keys and values), over Kubernetes' limit of "
                    f"{ANNOTATIONS_MAX_BYTES:,} (256 KiB): the API server refuses the object",
                    offset + rawyaml.line(node),
                )


# ---------------------------------------------------------------------------------------------
# Where a patch fails: kustomize names neither the file nor the operation


def locate_patch_failure(repo: Repository, folder: Path) -> list[Problem]:
    """When kustomize cannot build ``folder``: the first JSON patch operation that does not apply,
    with its file and line, found by applying the folder's patches (in kustomization order) to the
    objects they target: those of its job bases (built with kustomize) and of its own resource
    files. Empty when the folder is not of that shape (sub-kustomizations) or every patch applies."""

    import jsonpatch

    from trainyard.repo.model import kustomize

    s = Scan(repo, folder.resolve())
    root = kustomization_file(s.folder)
    docs = _read(s, root) if root is not None else None
    if not docs or not isinstance(docs[0], yaml.MappingNode):
        return []
    kust = docs[0]
    objects: list[dict] = []
    for entry in _seq(rawyaml.get(kust, "resources")):
        target = Path(os.path.realpath(s.folder / (rawyaml.scalar(entry) or "")))
        if target.is_dir() and s.job_base(target):
            objects += [r.doc for r in kustomize.build(repo, target)]
        elif target.is_file() and s.inside(target):
            objects += [d for d in (_python(n) for n in _read(s, target) or []) if isinstance(d, dict)]
        else:
            return []
    out: list[Problem] = []
    for entry in _seq(rawyaml.get(kust, "patches")) + _seq(rawyaml.get(kust, "patchesJson6902")):
        path, target = rawyaml.scalar(rawyaml.get(entry, "path")), rawyaml.get(entry, "target")
        if path is None or target is None:
            continue
        file = Path(os.path.realpath(s.folder / path))
        ops = next(iter(_read(s, file) or []), None)
        if not isinstance(ops, yaml.SequenceNode):
            continue
        want = {k: rawyaml.scalar(rawyaml.get(target, k)) for k in ("group", "version", "kind", "name", "namespace")}
        chosen = [o for o in objects if _selected(o, want)]
        if not chosen:
            where = f"{s.rel(root)}:{rawyaml.line(target)}"  # type: ignore[arg-type]
            out.append(error(where, f"the patch {path} targets {_describe(want)}, which no resource of the folder is"))
            continue
        for obj in chosen:
            for i, node in enumerate(ops.value):
                op = _python(node)
                try:
                    patched = jsonpatch.JsonPatch([op]).apply(obj)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
                    what = f"{op.get('op')} {op.get('path')}" if isinstance(op, dict) else "operation"
                    why = str(exc).split(" in {", 1)[0][:300]  # jsonpointer quotes the whole document after " in "
                    out.append(error(f"{s.rel(file)}:{rawyaml.line(node)}",
                                     f"JSON patch operation {i} ({what}) does not apply to {obj.get('kind')} "
                                     f"{(obj.get('metadata') or {}).get('name')}: {why}"))  # fmt: skip
                    return out
                obj.clear()
                obj.update(tree_copy(patched))
    return out


def _python(node: yaml.Node) -> object:
    """The node's value; None where it cannot be built (an integer of thousands of digits)."""
    try:
        return rawyaml.to_python(node)
    except (yaml.YAMLError, ValueError, RecursionError, TypeError):
        return None


def _selected(obj: dict, want: dict[str, str | None]) -> bool:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    have = {"group": group, "version": version, "kind": obj.get("kind"), "name": meta.get("name"),
            "namespace": meta.get("namespace")}  # fmt: skip
    return all(v is None or have[k] == v for k, v in want.items())


def _describe(want: dict[str, str | None]) -> str:
    return " ".join(f"{k} {v}" for k, v in want.items() if v is not None) or "everything"
