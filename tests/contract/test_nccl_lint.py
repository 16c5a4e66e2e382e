from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainyard.contract.nccl import FOLKLORE, TRAINER_NCCL, NcclVersion, errors, level_name, lint_env


def test_clean_env_has_no_findings():
    env = {"NCCL_SOCKET_IFNAME": "net1", "NCCL_IB_HCA": "mlx5", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_DEBUG": "INFO"}
    assert lint_env(env, expect_transport="IB") == []


@pytest.mark.parametrize("name", sorted(FOLKLORE))
def test_each_folklore_variable_is_an_error(name):
    findings = lint_env({name: "1"})
    assert [f.severity for f in findings] == ["error"] and findings[0].name == name
    # also when its value comes from elsewhere (valueFrom)
    assert errors(lint_env([(name, None)]))


@pytest.mark.parametrize(
    ("value", "named"),
    [("0", "LOC"), ("1", "PIX"), ("2", "PXB"), ("3", "PHB"), ("4", "SYS"), ("5", "SYS"), ("99", "SYS")],
)
def test_numeric_levels(value, named):
    assert level_name(value) == named
    (finding,) = lint_env({"NCCL_P2P_LEVEL": value})
    assert finding.severity == "warning" and f"NCCL_P2P_LEVEL={named}" in finding.message


def test_named_levels_and_non_numbers_are_fine():
    assert lint_env({"NCCL_NET_GDR_LEVEL": "PXB", "NCCL_P2P_LEVEL": "NVL"}) == []
    assert level_name("-1") is None and level_name("SYS") is None


def test_transport_switched_off():
    assert [f.name for f in lint_env({"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}, "IB")] == [
        "NCCL_IB_DISABLE",
        "NCCL_NET",
    ]
    assert lint_env({"NCCL_IB_DISABLE": "1"}, "Socket") == []
    with pytest.raises(ValueError):
        lint_env({}, "RDMA")


# --- judged for the NCCL release the trainer image ships -----------------------------------------

REPO = Path(__file__).resolve().parents[2]


def test_the_image_fact_matches_the_dockerfile():
    dockerfile = (REPO / "trainer" / "Dockerfile").read_text()
    pins = re.findall(r"^ARG NCCL_VERSION=(\S+)$", dockerfile, re.M)
    assert pins == [str(TRAINER_NCCL)], "trainer/Dockerfile and trainyard/contract/nccl.py disagree"
    # the torch whose Linux wheel requires exactly that NCCL (nvidia-nccl-cu13==2.30.7)
    assert '"torch==2.15.0"' in (REPO / "pyproject.toml").read_text()
    assert NcclVersion.parse("2.30.7+cuda13.0") == NcclVersion.parse("v2.30.7-1") == TRAINER_NCCL
    with pytest.raises(ValueError):
        NcclVersion.parse("latest")


def messages(env, transport=None, version=TRAINER_NCCL) -> list[tuple[str, str, str]]:
    return [(f.severity, f.name, f.message) for f in lint_env(env, transport, nccl_version=version)]


def test_a_pinned_gid_index_is_a_warning_from_2_21_with_the_reason():
    ((severity, name, message),) = messages({"NCCL_IB_GID_INDEX": "3"}, "IB")
    assert (severity, name) == ("warning", "NCCL_IB_GID_INDEX")
    assert "NCCL 2.30.7 (2.21+) picks the RoCE v2 GID" in message and "NCCL_IB_ADDR_FAMILY" in message
    assert messages({"NCCL_IB_GID_INDEX": "3"}, "IB", NcclVersion(2, 20, 5)) == []  # needed before 2.21
    assert messages({"NCCL_IB_GID_INDEX": "-1"}, "IB") == []  # the default: dynamic
    assert messages({"NCCL_IB_GID_INDEX": "three"})[0][:2] == ("error", "NCCL_IB_GID_INDEX")


@pytest.mark.parametrize(
    ("env", "version", "expected"),
    [
        ({"NCCL_IB_ADDR_FAMILY": "AF_INET6", "NCCL_IB_ADDR_RANGE": "fd00::/64"}, TRAINER_NCCL, []),
        ({"NCCL_IB_ROCE_VERSION_NUM": "2"}, NcclVersion(2, 19, 3), [("warning", "NCCL_IB_ROCE_VERSION_NUM")]),
        ({"NCCL_IB_ADDR_FAMILY": "IPv4"}, TRAINER_NCCL, [("error", "NCCL_IB_ADDR_FAMILY")]),
        ({"NCCL_IB_ADDR_RANGE": "10.0.0.0/33"}, TRAINER_NCCL, [("error", "NCCL_IB_ADDR_RANGE")]),
        (
            {"NCCL_IB_ADDR_FAMILY": "AF_INET", "NCCL_IB_ADDR_RANGE": "fd00::/64"},
            TRAINER_NCCL,
            [("error", "NCCL_IB_ADDR_RANGE")],
        ),
        ({"NCCL_IB_ROCE_VERSION_NUM": "3"}, TRAINER_NCCL, [("error", "NCCL_IB_ROCE_VERSION_NUM")]),
        (
            {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_ADDR_FAMILY": "AF_INET"},
            TRAINER_NCCL,
            [("warning", "NCCL_IB_GID_INDEX"), ("warning", "NCCL_IB_ADDR_FAMILY")],
        ),
    ],
)
def test_dynamic_gid_selectors(env, version, expected):
    assert [m[:2] for m in messages(env, "IB", version)] == expected


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("NCCL_SOCKET_IFNAME", "=net1", []),
        ("NCCL_SOCKET_IFNAME", "^docker,lo", []),
        ("NCCL_SOCKET_IFNAME", "^=docker0", []),
        ("NCCL_SOCKET_IFNAME", "=^docker0", [("error", "NCCL reads '^' (exclude) before '=' (exact)")]),
        ("NCCL_SOCKET_IFNAME", "eth0,,eth1", [("error", "has an empty entry")]),
        ("NCCL_SOCKET_IFNAME", "^", [("error", "has an empty entry")]),
        ("NCCL_IB_HCA", "mlx5", []),
        ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1", []),
        ("NCCL_IB_HCA", "mlx5_1:1", [("warning", "mlx5_1 also selects mlx5_10 to mlx5_19")]),
        ("NCCL_IB_HCA", "^mlx5", [("warning", "excludes every HCA whose name starts with mlx5")]),
        ("NCCL_IB_HCA", "^=mlx5_3", []),
    ],
)
def test_interface_and_hca_lists(name, value, expected):
    found = messages({name: value}, "IB")
    assert [(s, text in m) for (s, _, m), (_, text) in zip(found, expected, strict=True)] == [
        (s, True) for s, _ in expected
    ], found


@pytest.mark.parametrize(
    ("value", "version", "expected"),
    [
        ("ucx,ib", TRAINER_NCCL, []),
        ("ucx,ib", NcclVersion(2, 26, 6), [("error", "takes one plugin (lists came in 2.27.3)")]),
        ("none", TRAINER_NCCL, []),
        ("none", NcclVersion(2, 27, 7), [("warning", "understood from NCCL 2.28.3")]),
        ("none,ucx", TRAINER_NCCL, [("error", "must stand alone")]),
        ("ucx,,ib", TRAINER_NCCL, [("error", "empty entry")]),
        ("ib,IB", TRAINER_NCCL, [("warning", "names a plugin twice")]),
    ],
)
def test_net_plugin_lists(value, version, expected):
    found = messages({"NCCL_NET_PLUGIN": value}, None, version)
    assert [(s, e in m) for (s, _, m), (_, e) in zip(found, expected, strict=True)] == [(s, True) for s, _ in expected]


def test_settings_that_quietly_take_rdma_away():
    assert messages({"NCCL_NET_GDR_LEVEL": "LOC"}, "IB")[0][:2] == ("warning", "NCCL_NET_GDR_LEVEL")
    assert [m[:2] for m in messages({"UCX_TLS": "tcp,cuda_copy"}, "IB")] == [("warning", "UCX_TLS")]
    pinned = messages({"UCX_TLS": "tcp", "NCCL_PLUGIN_P2P": "ucx"}, "IB")
    assert pinned[0][:2] == ("error", "UCX_TLS") and "runs over TCP" in pinned[0][2]
    assert messages({"UCX_TLS": "rc,cuda_copy"}, "IB") == [] and messages({"UCX_TLS": "^tcp"}, "IB") == []
    assert messages({"UCX_TLS": "tcp"}, "Socket") == []  # a TCP fabric promises nothing else


def test_the_repository_profiles_are_clean_for_the_image():
    import yaml

    for path in sorted((REPO / "policies").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc.get("kind") != "FabricProfile":
            continue
        env = {e["name"]: e.get("value") for e in doc["spec"]["env"]}
        assert lint_env(env, doc["spec"]["transport"]) == [], path.name


# --- misspelt variables: NCCL ignores them, so the lint names the one that was meant ----------------


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("NCCL_SOCKET_IFNMAE", "NCCL_SOCKET_IFNAME"),  # two neighbours swapped
        ("NCCL_SOCKET_IFNAM", "NCCL_SOCKET_IFNAME"),
        ("nccl_socket_ifname", "NCCL_SOCKET_IFNAME"),  # NCCL reads upper case only
        ("NCCL_IB_HCAS", "NCCL_IB_HCA"),
        ("NCCL_IB_DISABLED", "NCCL_IB_DISABLE"),
        ("NCCL_DEBG", "NCCL_DEBUG"),
        ("NCCL_IB_GID_IDX", "NCCL_IB_GID_INDEX"),
        ("NCCL_P2P_DISBLE", "NCCL_P2P_DISABLE"),
        ("Nccl_Net_Gdr_Level", "NCCL_NET_GDR_LEVEL"),
    ],
)
def test_a_misspelt_variable_names_the_likely_one(name, meant):
    (finding,) = lint_env({name: "1"})
    assert finding.severity == "error" and finding.name == name
    assert f"did you mean {meant}?" in finding.message and "does nothing" in finding.message


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_DEBUG",  # read by NCCL
        "NCCL_NET_GDR_READ",
        "NCCL_PLUGIN_P2P",  # read by the HPC-X plugin the lint knows
        "NCCL_FOO_BAR",  # close to nothing: not ours to guess
        "NCCL_",
        "NCCL",
        "MY_NCCL_SOCKET_IFNAME",  # not an NCCL_ name
        "TORCH_NCCL_BLOCKING_WAIT",
        "NCCL_SOCKET_IFNAME" * 10,  # too long to be any NCCL variable
    ],
)
def test_names_nccl_reads_or_that_are_close_to_nothing_pass(name):
    assert not [f for f in lint_env({name: "x"}) if "did you mean" in f.message]


def test_a_look_alike_character_is_named_as_a_misspelling():
    (finding,) = lint_env({"NCCL_\u0130B_HCA": "mlx5"})  # a capital I with a dot: no variable NCCL reads
    assert "did you mean NCCL_IB_HCA?" in finding.message


def test_another_nccl_release_makes_a_misspelling_a_warning():
    """The list is TRAINER_NCCL's: a newer NCCL in a user's image may read a name it lacks."""
    (finding,) = lint_env({"NCCL_IB_HCAS": "mlx5"}, nccl_version=NcclVersion(2, 31, 1))
    assert finding.severity == "warning" and "NCCL 2.31.1 reads no variable NCCL_IB_HCAS" in finding.message
    (finding,) = lint_env({"NCCL_IB_HCAS": "mlx5"}, nccl_version=None)
    assert finding.severity == "warning"


def test_hostile_names_get_an_answer_in_bounded_time():
    hostile = ["NCCL_" + "A" * 10_000, "NCCL_\x00SOCKET_IFNAME", "NCCL_SOCKET_IFNAME\n", "NCCL_" + "\u00e9" * 60]
    for name in hostile:
        findings = lint_env({name: "eth0"})
        assert all("did you mean" not in f.message or len(name) <= 64 for f in findings)


def test_the_variable_list_is_nccls_and_covers_what_the_lint_names():
    from trainyard.contract.nccl import LEVEL_VARIABLES, NAME_LISTS, SOCKET_IFNAME
    from trainyard.contract.nccl_variables import KNOWN_VARIABLES

    for name in (*NAME_LISTS, *LEVEL_VARIABLES, SOCKET_IFNAME, "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_NET_PLUGIN"):
        assert name in KNOWN_VARIABLES, name
    # the legacy aliases NCCL still reads are folklore all the same (the lint says what to use)
    assert set(FOLKLORE) & KNOWN_VARIABLES == {"NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS"}


def test_name_lists_are_read_as_nccl_2_30_reads_them():
    """src/misc/utils.cc parseStringList at v2.30.7-1: name[:port[:rail[:plane]]], name cut to 63 bytes."""
    from trainyard.contract.nccl import NameList

    assert NameList.parse("=mlx5_0:").entries == (("mlx5_0", -1),)  # an empty port: any (2.29 read 0)
    assert NameList.parse("=mlx5_0:").selects("mlx5_0", 1)
    assert NameList.parse("mlx5_0:1:0:1,mlx5_1").entries == (("mlx5_0", 1), ("mlx5_1", -1))
    assert NameList.parse("^eth0:x").entries == (("eth0", 0),)  # atoi of no number
    assert NameList.parse("x" * 80).entries == (("x" * 63, -1),)
