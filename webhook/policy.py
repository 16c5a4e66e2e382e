"""FabricProfile documents: typed, validated once at load.

A profile is data: which images are trainers, which fabric attachment they need, and what the
engine injects. ``load_policies(dir)`` reads every ``*.yaml`` in a directory and returns a
:class:`PolicySet` or raises :class:`PolicyError` whose message names the file and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trainyard.contract import images
from trainyard.contract.errors import UserError, describe_fields
from trainyard.contract.files import MAX_CONFIG_BYTES, FileTooLarge, read_text_bounded
from trainyard.contract.k8s import DNS1123_LABEL, ENV_NAME, is_qualified_name
from trainyard.contract.names import ENGINE_ENV, TRANSPORTS
from trainyard.contract.nccl import SOCKET_IFNAME, Finding, lint_env
from trainyard.contract.networks import RESERVED_INTERFACES
from trainyard.contract.quantity import QuantityError, parse_quantity

KIND = "FabricProfile"
# libyaml's parser where PyYAML was built with it (the same SafeConstructor): every validate and
# every webhook start reads the profiles, and the pure-Python parser is ten times slower
_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Transport = Literal[TRANSPORTS]  # type: ignore[valid-type]
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


# why a policy set is refused (the reload metric's reasons)
REFUSAL_REASONS = ("invalid", "truncated", "dropped_profile", "no_default")


class PolicyError(UserError, ValueError):
    """A policy file is wrong; the message names the file and the field. ``reason`` says which
    kind of wrong, for the reload metric."""

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


def _quantity(value: object) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def _quantity_text(value: object) -> str:
    """A valid quantity, kept as the text the profile wrote (it goes into pod specs as is)."""
    _quantity(value)
    return str(value)


def _bytes(value: object) -> int:
    q = _quantity(value)
    if q <= 0 or q != q.to_integral_value():
        raise ValueError(f"{value!r} must be a positive whole number of bytes (examples: 8Gi, 512Mi)")
    return int(q)


def _matches(pattern: re.Pattern[str], what: str):
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what}")
        return value

    return AfterValidator(check)


def _qualified(what: str):
    def check(value: str) -> str:
        if not is_qualified_name(value):
            raise ValueError(f"{value!r} is not a valid {what} (a Kubernetes qualified name: [prefix/]name)")
        return value

    return AfterValidator(check)


def _interface(value: str) -> str:
    if value in RESERVED_INTERFACES:
        raise ValueError(f"{value!r} already exists in every pod ({', '.join(RESERVED_INTERFACES)}); pick another name")
    return value


Bytes = Annotated[int, BeforeValidator(_bytes)]
Dns1123Label = Annotated[str, _matches(DNS1123_LABEL, "DNS-1123 label (lower case, digits, '-')")]
ResourceName = Annotated[str, _qualified("resource name")]
TopologyKey = Annotated[str, _qualified("label key")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class Network(_Model):
    """One NetworkAttachmentDefinition the trainer pods must be attached to."""

    name: Dns1123Label  # Multus accepts DNS-1123 labels only
    namespace: Dns1123Label | None = None
    interface: (
        Annotated[str, _matches(_IFNAME, "interface name (at most 15 characters)"), AfterValidator(_interface)] | None
    ) = None


class EnvVar(_Model):
    name: Annotated[str, _matches(ENV_NAME, "environment variable name")]
    value: str | None = None
    # "interface": the value is the interface the fabric attachment (networks[0]) gets in the pod.
    from_network: Literal["interface"] | None = None
    enforced: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.from_network is None):
            raise ValueError("set exactly one of 'value' and 'fromNetwork'")
        return self


class ShmRule(_Model):
    """Size of the memory-backed /dev/shm: min(perGPU x GPUs, max), capped at
    memoryLimitFraction of the trainer containers' memory limit, at least min."""

    per_gpu: Bytes = Field(alias="perGPU")
    max: Bytes
    min: Bytes
    memory_limit_fraction: float = Field(0.5, gt=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> ShmRule:
        if self.min > self.max:
            raise ValueError(f"min ({self.min} bytes) is larger than max ({self.max} bytes)")
        return self


class Colocate(_Model):
    key: TopologyKey = "topology.kubernetes.io/zone"
    mode: Literal["preferred", "required"] = "preferred"
    weight: int = Field(100, ge=1, le=100)


class Spread(_Model):
    key: TopologyKey = "kubernetes.io/hostname"
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "ScheduleAnyway"


class Topology(_Model):
    colocate: Colocate | None = Colocate()
    spread: Spread | None = Spread()


class Toleration(_Model):
    """As core/v1 validation.go validateTolerations has it."""

    key: Annotated[str, _qualified("toleration key")] | None = None
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self

    def as_k8s(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True)


class Spec(_Model):
    description: str = ""
    trainer_images: list[str] = Field(min_length=1)
    transport: Transport
    networks: list[Network] = Field(min_length=1)
    env: list[EnvVar] = []
    gpu_resource: ResourceName = "nvidia.com/gpu"
    rdma_resources: dict[ResourceName, Annotated[str, BeforeValidator(_quantity_text)]] = {}
    capabilities: list[Annotated[str, _matches(re.compile(r"^[A-Z_]+$"), "capability (e.g. IPC_LOCK)")]] = []
    shm: ShmRule
    topology: Topology = Topology()
    tolerations: list[Toleration] = []

    @model_validator(mode="after")
    def _env_rules(self) -> Spec:
        names = [e.name for e in self.env]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"env declares {', '.join(dupes)} more than once")
        by_name = {e.name: e for e in self.env}
        ifname = by_name.get(SOCKET_IFNAME)
        if ifname is None or ifname.from_network != "interface" or not ifname.enforced:
            raise ValueError(
                f"env must declare {SOCKET_IFNAME} with 'fromNetwork: interface' and 'enforced: true': "
                "NCCL must use the interface of the fabric attachment, whatever a pod says"
            )
        for e in self.env:
            if e.name in ENGINE_ENV:
                raise ValueError(f"env may not set {e.name}: the engine sets it from the profile")
        return self


class Metadata(_Model):
    name: Dns1123Label


class FabricProfile(_Model):
    api_version: Literal["trainyard.dev/v1alpha1"]
    kind: Literal["FabricProfile"]
    metadata: Metadata
    spec: Spec

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True)
class CompiledProfile:
    """A profile with the lookups the engine needs precomputed (hot path stays cheap)."""

    profile: FabricProfile
    trainer_images: frozenset[str]  # each trainer repository, normalised (images.identity)
    warnings: tuple[Finding, ...] = ()
    # (name, value, enforced) in the profile's order; value None: the fabric interface's name
    env_plan: tuple[tuple[str, str | None, bool], ...] = field(default=())
    tolerations: tuple[dict, ...] = ()  # as Kubernetes spells them (copy before handing out)

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def spec(self) -> Spec:
        return self.profile.spec

    def is_trainer_image(self, image: object) -> bool:
        """By the one identity rule (images.identity), as base/webhook's CEL decides it too."""
        return images.identity(image) in self.trainer_images


def compile_profile(profile: FabricProfile) -> CompiledProfile:
    spec = profile.spec
    repos: set[str] = set()
    for i, image in enumerate(spec.trainer_images):
        try:
            repos.add(images.repository(image))
        except images.RepositoryError as exc:
            raise ValueError(f"trainerImages[{i}]: {exc}") from None
    return CompiledProfile(
        profile=profile,
        trainer_images=frozenset(repos),
        env_plan=tuple((e.name, e.value, e.enforced) for e in spec.env),
        tolerations=tuple(t.as_k8s() for t in spec.tolerations),
    )


@dataclass(frozen=True)
class PolicySet:
    profiles: dict[str, CompiledProfile]
    source: str = ""

    def get(self, name: str) -> CompiledProfile | None:
        return self.profiles.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self.profiles)

    @property
    def warnings(self) -> list[str]:
        return [f"{name}: {w}" for name, p in sorted(self.profiles.items()) for w in p.warnings]


def parse_profile(data: object, where: str) -> CompiledProfile:
    """Validate one FabricProfile document; ``where`` names it in error messages."""
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: expected a FabricProfile mapping, got {type(data).__name__}")
    try:
        profile = FabricProfile.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(describe_fields(exc.errors(include_url=False), where, KIND)) from None
    try:
        compiled = compile_profile(profile)
    except ValueError as exc:
        raise PolicyError(f"{where}: spec.{exc}") from None
    env = [(e.name, e.value) for e in profile.spec.env]
    findings = lint_env(env, expect_transport=profile.spec.transport)
    bad = [f for f in findings if f.severity == "error"]
    if bad:
        raise PolicyError("\n".join(f"{where}: spec.env.{f.name}: {f.message}" for f in bad))
    return CompiledProfile(**{**compiled.__dict__, "warnings": tuple(f for f in findings if f.severity == "warning")})


def load_policies(directory: str | Path) -> PolicySet:
    """Load every ``*.yaml``/``*.yml`` FabricProfile in ``directory`` (not recursive).

    Files whose kind is not FabricProfile (a kustomization.yaml, say) are skipped. A directory
    with no profile, an empty file, a file that does not end with a line break (cut short while
    being written: it may still parse, e.g. a toleration key ``nvidia.com/g``), a YAML error, an
    invalid profile or two profiles of the same name is a PolicyError naming the file. Each file,
    and all of them together, are bounded by what one ConfigMap can hold (MAX_CONFIG_BYTES): a
    larger file is refused before it is read.
    """
    root = Path(directory)
    if not root.is_dir():
        raise PolicyError(f"{root}: not a directory of FabricProfile files")
    profiles: dict[str, CompiledProfile] = {}
    origin: dict[str, Path] = {}
    files = sorted(p for p in root.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    total = 0
    for path in files:
        try:
            text = read_text_bounded(path, what="the profile file")
            total += len(text.encode("utf-8"))
            if total > MAX_CONFIG_BYTES:
                raise PolicyError(
                    f"{root}: the profile files up to {path.name} hold {total} bytes, over the bound of "
                    f"{MAX_CONFIG_BYTES} bytes (what one ConfigMap can hold); keep the profiles, not other data, there"
                )
            if not text.strip():
                raise PolicyError(f"{path}: the file is empty; remove it, or write the profile into it", "truncated")
            if not text.endswith("\n"):
                raise PolicyError(
                    f"{path}: does not end with a line break, so it was probably cut short while being written; "
                    "a complete file ends with one",
                    "truncated",
                )
            docs = list(yaml.load_all(text, Loader=_LOADER))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise PolicyError(f"{path}{at}: not valid YAML: {problem}") from None
        except FileTooLarge as exc:
            raise PolicyError(str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"{path}: cannot read: {exc}") from None
        for i, doc in enumerate(docs):
            if doc is None or (isinstance(doc, dict) and doc.get("kind") != KIND):
                continue
            where = str(path) if len(docs) == 1 else f"{path} (document {i + 1})"
            compiled = parse_profile(doc, where)
            if compiled.name in profiles:
                raise PolicyError(
                    f"{where}: metadata.name: profile {compiled.name!r} is already defined in {origin[compiled.name]}"
                )
            profiles[compiled.name] = compiled
            origin[compiled.name] = path
    if not profiles:
        raise PolicyError(f"{root}: no FabricProfile documents found (expected {root}/<fabric>.yaml)")
    _same_trainer_images(profiles, origin)
    return PolicySet(profiles=profiles, source=str(root))


def _same_trainer_images(profiles: dict[str, CompiledProfile], origin: dict[str, Path]) -> None:
    """Every profile declares the same trainer repositories (by images.identity). The webhook's
    matchConditions and the admission policies recognise a trainer pod by the repositories of all
    profiles together, the engine by its profile's: a repository one profile lacks would reach that
    fabric's pods unmutated, and the ValidatingAdmissionPolicy would then refuse them."""
    names = sorted(profiles)
    first = profiles[names[0]]
    for name in names[1:]:
        other = profiles[name]
        if other.trainer_images != first.trainer_images:
            missing = sorted(first.trainer_images - other.trainer_images)
            extra = sorted(other.trainer_images - first.trainer_images)
            what = "; ".join(
                part
                for part in (
                    f"it lacks {', '.join(missing)} that {origin[first.name].name} lists" if missing else "",
                    f"it lists {', '.join(extra)} that {origin[first.name].name} lacks" if extra else "",
                )
                if part
            )
            raise PolicyError(
                f"{origin[name]}: spec.trainerImages: {what}. Every FabricProfile lists the same repositories "
                "(the shared trainer image and the images built FROM it that the platform declares), because "
                "admission recognises a trainer pod by all of them; add the repository to every profile, or remove it"
            )


def reload_problems(previous: PolicySet, new: PolicySet, default: str) -> list[tuple[str, str]]:
    """Why ``new`` must not replace ``previous`` while serving (reason, message); empty if it may.

    A set may change profiles but not lose one: a profile that disappears between two reloads is
    far more often a file emptied, cut short or misspelt than a decision, and every pod that names
    it would then be denied. Removing a profile takes a new webhook Deployment (a new policy
    ConfigMap rolls it), which starts from the files as they are. The default profile must stay.
    """
    out = []
    dropped = sorted(set(previous.profiles) - set(new.profiles))
    if dropped:
        out.append(
            (
                "dropped_profile",
                f"{new.source}: profile{'s' if len(dropped) > 1 else ''} {', '.join(dropped)} would disappear "
                f"(the set now holds {', '.join(new.names)}); a running webhook never drops a profile: "
                "restore the file, or roll out the webhook to remove it",
            )
        )
    if new.get(default) is None:
        out.append(("no_default", f"{new.source}: the default profile {default!r} is not defined"))
    return out
