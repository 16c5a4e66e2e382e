"""NetworkAttachmentDefinition CNI configs, checked offline."""

from __future__ import annotations

import ipaddress
import json

from trainyard.repo.model import nad


def _nad(config: dict | str) -> dict:
    text = config if isinstance(config, str) else json.dumps(config)
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "spec": {"config": text}}


def test_dev_fabric_addresses(report):
    dev = next(r for r in report.renders["dev"].resources() if nad.is_nad(r.doc))
    assert dev.name == "training-network"
    cfg = nad.config(dev.doc)
    assert cfg["type"] == "macvlan" and cfg["master"] == "eth0"
    net, first, last = nad.address_range(cfg)
    assert net == ipaddress.ip_network("192.168.100.0/24") and (first, last) == ("192.168.100.10", "192.168.100.50")


def test_problems():
    assert nad.config_problems(_nad("{not json"))[0][0].startswith("spec.config is not valid JSON")
    errors, _ = nad.config_problems(
        _nad({"cniVersion": "0.3.1", "type": "macvlan", "ipam": {"type": "whereabouts", "range": "10.0.0.0/24"}})
    )
    assert any("macvlan needs master" in e for e in errors)
    errors, _ = nad.config_problems(
        _nad({"cniVersion": "0.3.1", "type": "macvlan", "master": "eth1",
              "ipam": {"type": "whereabouts", "range": "10.0.0.0/24", "range_start": "10.0.1.5"}})
    )  # fmt: skip
    assert any("outside 10.0.0.0/24" in e for e in errors)
    errors, warnings = nad.config_problems(
        _nad(
            {
                "cniVersion": "0.3.1",
                "type": "macvlan",
                "master": "eth1",
                "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"},
            }
        )
    )
    assert errors == [] and any("host-local IPAM allocates per node" in w for w in warnings)
    errors, _ = nad.config_problems(_nad({"cniVersion": "0.3.1", "type": "ib-sriov"}))
    assert any("without ipam" in e for e in errors)
