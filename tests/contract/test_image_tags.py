"""The one image-tag rule (trainyard/contract/images.py ``floating``): a digest always passes; no
tag, ``latest`` and branch-like tags are refused; fixed release tags pass, whatever their spelling.
The same rule judges rendered images in ``validate``, the image pins of Applications and
``new-job --image``; docs/gitops.md states it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainyard.contract.images import MOVING_WORDS, floating

RELEASES = [
    "registry.k8s.io/kueue/kueue:v0.19.2",
    "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0-thick",
    "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",  # a commit
    "registry.example.com/platform/trainyard-webhook:0.1.0",
    # real release tags that are not semantic versions (vendors' and upstream examples)
    "nvcr.io/nvidia/pytorch:25.01-py3",
    "docker.io/kubeflow/pytorch-dist-mnist:v7.0",
    "kubeflow/pytorch-elastic-example-imagenet:pytorch2.5.1",
    "ghcr.io/acme/train:py311-cuda121-torch241",
    "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "mosaicml/pytorch:2.4.0_cu124-python3.11-ubuntu20.04",
    "python:3.11",  # a line or a release: the spelling cannot tell; see docs/gitops.md
    "ghcr.io/acme/train:main-93c5489",  # a branch build named by its commit
    "ghcr.io/acme/train:nightly-20261201",  # a dated build
    "busybox@sha256:" + "a" * 64,
    "busybox:latest@sha256:" + "a" * 64,  # the digest decides
    "r/x:1.0.0@sha256:" + "f" * 100_000,  # a digest of any length the grammar allows
]

MOVING = [
    ("ghcr.io/k8snetworkplumbingwg/whereabouts:latest", "latest"),
    ("ghcr.io/k8snetworkplumbingwg/whereabouts", "no tag"),
    ("us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:release-0.19", "release branch"),
    ("ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot-thick", "(snapshot)"),
    ("nginx:main", "(main)"),
    ("nginx:v1", "major-version line"),
    ("nginx:1", "major-version line"),
    ("nginx:stable-alpine", "(stable)"),
    ("acme/train:LATEST", "(LATEST)"),
    ("acme/train:latest-gpu", "(latest)"),
    ("acme/train:dev", "(dev)"),
    ("acme/train:nightly", "(nightly)"),
    ("acme/train:nightly-2026", "(nightly)"),  # a year is no date
    ("acme/train:main-deadbeefcafe0000000000000000000000000000000", "(main)"),  # 43 hex digits: no commit
]


@pytest.mark.parametrize("image", RELEASES)
def test_release_tags_and_digests_pass(image):
    assert floating(image) is None


@pytest.mark.parametrize(("image", "why"), MOVING)
def test_moving_tags_are_refused_saying_why(image, why):
    got = floating(image)
    assert got is not None and why in got, got


@pytest.mark.parametrize(
    "image",
    [
        "UPPER/Case:1.0.0",
        "",
        None,
        12,
        "r/x:" + "a" * 129,  # a tag has 128 characters at most
        "r/x:" + "9" * 100_000,
        "r/x:v" + "1." * 50_000 + "1",
        "r/" + "a/" * 20_000 + "x:1.0.0",
        "acme/train:\u00e9",
        "acme/train:v1\n",
        "acme/train:v1\x00",
    ],
)
def test_hostile_references_are_refused_as_no_reference(image):
    assert floating(image) == "is not a valid image reference"


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzLATESTMAIN0123456789.-_", min_size=1, max_size=128))
def test_any_tag_gets_an_answer_and_a_moving_word_is_never_a_release(tag):
    image = f"acme/train:{tag}"
    why = floating(image)
    words = [w for w in tag.replace("-", ".").replace("_", ".").split(".")]
    if why is None and tag[0] not in ".-":
        # a release may not carry a moving word unless a commit or a date names the build
        moving = [w for w in words if w.lower() in MOVING_WORDS]
        assert not moving or any(len(w) >= 7 for w in words), (tag, moving)
