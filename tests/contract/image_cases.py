"""The one table of image-identity cases: is this image the trainer image?

The engine (images.identity through CompiledProfile.is_trainer_image), the webhook's
matchConditions and the admission policy (their CEL, evaluated with the real CEL library) must all
answer as the table says; tests/contract, tests/webhook and tests/trainyard read it.
"""

from __future__ import annotations

TRAINER = "registry.example.com/ml/trainer"
SHA256 = "sha256:" + "a" * 64

# (image, runs the trainer image TRAINER)
CASES: list[tuple[str, bool]] = [
    ("registry.example.com/ml/trainer", True),
    ("registry.example.com/ml/trainer:0.1.0", True),
    (f"registry.example.com/ml/trainer@{SHA256}", True),
    (f"registry.example.com/ml/trainer:0.1.0@{SHA256}", True),
    ("registry.example.com/ml/trainer@sha512:" + "c" * 128, True),
    # the registry host in any case: DNS names are case-insensitive
    ("REGISTRY.EXAMPLE.COM/ml/trainer", True),
    ("Registry.Example.Com/ml/trainer:1", True),
    # the default HTTPS port, written or not, with leading zeros or not
    ("registry.example.com:443/ml/trainer", True),
    ("registry.example.com:0443/ml/trainer:1", True),
    (f"REGISTRY.example.com:443/ml/trainer@{SHA256}", True),
    ("registry.example.com/ml/trainer:" + "t" * 128, True),  # the longest tag
    ("registry.example.com/ml/trainer:Ver_1.2-rc", True),
    # other ports are other endpoints
    ("registry.example.com:5000/ml/trainer", False),
    ("registry.example.com:80/ml/trainer", False),
    ("registry.example.com:4430/ml/trainer", False),
    # the path is case-sensitive (and upper case is no reference at all)
    ("registry.example.com/ML/trainer", False),
    ("registry.example.com/ml/Trainer:1", False),
    # look-alikes
    ("registry.example.com/ml/trainer-evil:1", False),
    ("registry.example.com/ml/trainers", False),
    ("registry.example.com/ml/trainer/sub:1", False),
    ("registry.example.com/ml/trainer.x", False),
    ("evil.example.com/registry.example.com/ml/trainer:1", False),
    ("registry.example.com.evil.com/ml/trainer", False),
    ("registry.example.com./ml/trainer", False),
    ("xregistry.example.com/ml/trainer", False),
    ("ml/trainer", False),  # Docker Hub's ml/trainer
    ("trainer", False),
    # not references
    ("registry.example.com/ml/trainer:", False),
    ("registry.example.com/ml/trainer:-1", False),
    ("registry.example.com/ml/trainer:" + "t" * 129, False),
    ("registry.example.com/ml/trainer@sha256:abc", False),
    # a digest's algorithm in capitals: no reference without a tag (normalize.go lowercases the
    # name up to the first ':'), one with a tag before it
    ("registry.example.com/ml/trainer@Sha256:" + "a" * 64, False),
    ("registry.example.com/ml/trainer:1@Sha256:" + "a" * 64, True),
    ("registry.example.com/ml/trainer@", False),
    ("registry.example.com/ml/trainer:1:2", False),
    ("registry.example.com:/ml/trainer", False),
    ("registry.example.com:44a3/ml/trainer", False),
    ("registry.example.com//ml/trainer", False),
    ("registry.example.com/ml//trainer", False),
    ("registry.example.com/ml/trainer\n", False),
    (" registry.example.com/ml/trainer", False),
    ("registry.example.com/ml/trainer ", False),
    ("régistry.example.com/ml/trainer", False),
]

HUB = "docker.io/library/trainer"
# (image, runs HUB): Docker Hub's spellings of one repository
HUB_CASES: list[tuple[str, bool]] = [
    ("trainer", True),
    ("trainer:2", True),
    (f"trainer@{SHA256}", True),
    ("library/trainer", True),
    ("docker.io/trainer", True),
    ("docker.io/library/trainer:1", True),
    ("index.docker.io/library/trainer", True),
    ("registry-1.docker.io/trainer", True),
    ("DOCKER.IO/trainer", True),
    ("Index.Docker.Io/library/trainer", True),
    ("docker.io:443/library/trainer", True),
    ("trainer2", False),
    ("library/trainer/x", False),
    ("localhost/trainer", False),
    ("localhost/library/trainer", False),
    ("other/trainer", False),
    ("docker.io/other/trainer", False),
    ("quay.io/library/trainer", False),
    ("docker.io:5000/library/trainer", False),
    ("Library/trainer", False),  # an upper-case first component is a registry host ("library")
]
