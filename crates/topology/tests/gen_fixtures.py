#!/usr/bin/env python3
"""Regenerate the hand-made hwloc v2 XML fixtures in testdata/topologies/.

Each fixture starts from hwloc's own synthetic export (CPU/cache/NUMA tree with Linux-style
PU numbering), then gets by hand what a real `lstopo --of xml` capture has and synthetic
topologies lack: machine/package infos, the NUMA latency matrix (<distances2>), and the
PCI host bridge -> root port -> PCI device -> OS device chains that give NICs and disks
their locality.

Needs `lstopo-no-graphics` (Debian package hwloc). Run from anywhere:

    python3 crates/topology/tests/gen_fixtures.py

then check each file with `lstopo-no-graphics -i FILE` and `cargo test -p sluice-topology`.
Values that hwloc itself does not write: the `LinkSpeedMbps` info on network OS devices
(sluice reads it as the link speed of a NIC described by XML). MAC addresses and serial
numbers are invented.
"""

import os
import subprocess
import xml.etree.ElementTree as ET

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
OUT = os.path.join(ROOT, "testdata", "topologies")


def synthetic_xml(description):
    out = subprocess.run(
        ["lstopo-no-graphics", "--input", description, "--of", "xml"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return ET.fromstring(out.encode())


def find_object(root, obj_type, os_index=None, nodeset_of=None):
    for obj in root.iter("object"):
        if obj.get("type") != obj_type:
            continue
        if os_index is not None and obj.get("os_index") != str(os_index):
            continue
        return obj
    raise KeyError((obj_type, os_index))


def parent_map(root):
    return {child: parent for parent in root.iter() for child in parent}


def io_parent_of_node(root, node_os_index):
    """The normal object a NUMA node is attached to (hwloc puts I/O next to it)."""
    parents = parent_map(root)
    node = find_object(root, "NUMANode", node_os_index)
    parent = parents[node]
    # Like hwloc, attach I/O to the highest ancestor that has the same cpuset.
    while parent in parents and parents[parent].get("cpuset") == parent.get("cpuset"):
        if parents[parent].get("type") == "Machine":
            break
        parent = parents[parent]
    return parent


def set_machine_infos(root, infos):
    machine = root.find("object")
    for info in list(machine.findall("info")):
        machine.remove(info)
    for i, (name, value) in enumerate(infos):
        machine.insert(i, ET.Element("info", name=name, value=value))


def set_package_infos(root, infos):
    for pkg in root.iter("object"):
        if pkg.get("type") != "Package":
            continue
        for i, (name, value) in enumerate(infos):
            pkg.insert(i, ET.Element("info", name=name, value=value))


def set_cache_assoc(root, assoc):
    """Synthetic caches have associativity 0 (unknown); put the real ones."""
    for obj in root.iter("object"):
        key = (obj.get("type"), obj.get("cache_type"))
        if key in assoc:
            obj.set("cache_associativity", str(assoc[key]))


def add_distances(root, matrix):
    n = len(matrix)
    dist = ET.Element(
        "distances2", type="NUMANode", nbobjs=str(n), kind="5", name="NUMALatency", indexing="os"
    )
    idx = ET.SubElement(dist, "indexes", length="0")
    idx.text = "".join(f"{i} " for i in range(n))
    idx.set("length", str(len(idx.text)))
    # hwloc writes at most 16 values per line.
    values = [v for row in matrix for v in row]
    for start in range(0, len(values), 16):
        line = ET.SubElement(dist, "u64values", length="0")
        line.text = "".join(f"{v} " for v in values[start : start + 16])
        line.set("length", str(len(line.text)))
    # distances2 go after the object tree, before <support> elements.
    children = list(root)
    pos = next((i for i, c in enumerate(children) if c.tag == "support"), len(children))
    root.insert(pos, dist)


def pci(busid, pci_type, speed, infos=(), children=()):
    obj = ET.Element("object", type="PCIDev", pci_busid=busid, pci_type=pci_type,
                     pci_link_speed=speed)
    for name, value in infos:
        ET.SubElement(obj, "info", name=name, value=value)
    obj.extend(children)
    return obj


def bridge(busid, pci_type, secondary, subordinate, speed, infos=(), children=()):
    obj = ET.Element("object", type="Bridge", bridge_type="1-1", depth="1",
                     bridge_pci=f"0000:[{secondary:02x}-{subordinate:02x}]",
                     pci_busid=busid, pci_type=pci_type, pci_link_speed=speed)
    for name, value in infos:
        ET.SubElement(obj, "info", name=name, value=value)
    obj.extend(children)
    return obj


def host_bridge(first_bus, last_bus, children):
    obj = ET.Element("object", type="Bridge", bridge_type="0-1", depth="0",
                     bridge_pci=f"0000:[{first_bus:02x}-{last_bus:02x}]")
    obj.extend(children)
    return obj


def osdev(name, osdev_type, infos=(), subtype=None):
    attrs = {"type": "OSDev", "name": name, "osdev_type": str(osdev_type)}
    if subtype:
        attrs["subtype"] = subtype
    obj = ET.Element("object", attrs)
    for key, value in infos:
        ET.SubElement(obj, "info", name=key, value=value)
    return obj


OSDEV_BLOCK, OSDEV_NETWORK, OSDEV_OPENFABRICS = 0, 2, 3


def attach_io(root, node_os_index, host):
    io_parent_of_node(root, node_os_index).append(host)


def renumber_gp_index(root):
    for gp, obj in enumerate(root.iter("object"), start=1):
        # keep hwloc's attribute order: gp_index right after the sets
        obj.set("gp_index", str(gp))


def write(root, name):
    """Write the tree, then let hwloc load and re-export it, so that the committed file
    is exactly what hwloc 2.9 itself writes (attribute order, distance layout)."""
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    text = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n' + body + "\n"
    )
    path = os.path.join(OUT, name)
    draft = path + ".draft"
    with open(draft, "w") as f:
        f.write(text)
    try:
        exported = subprocess.run(
            ["lstopo-no-graphics", "-i", draft, "--of", "xml"],
            check=True, capture_output=True, text=True,
        )
    finally:
        os.remove(draft)
    if exported.stderr:
        raise SystemExit(f"hwloc complained about {name}:\n{exported.stderr}")
    with open(path, "w") as f:
        f.write(exported.stdout)
    print("wrote", path)


def linux_infos(hostname, product):
    return [
        ("DMIProductName", product),
        ("Backend", "Linux"),
        ("LinuxCgroup", "/"),
        ("OSName", "Linux"),
        ("OSRelease", "5.10.0-28-amd64"),
        ("Architecture", "x86_64"),
        ("hwlocVersion", "2.9.0"),
        ("HostName", hostname),
        ("ProcessName", "lstopo"),
    ]


def dtn():
    """ESnet-style DTN: 2x Xeon E5-2643 (4 cores, 2 threads), 1 node per socket, 2x 40G."""
    # Linux numbering on a 2-socket Intel box: first threads 0-3 socket 0, 4-7 socket 1,
    # hyperthread siblings 8-11 socket 0, 12-15 socket 1.
    pus = [t * 8 + p * 4 + c for p in range(2) for c in range(4) for t in range(2)]
    desc = (
        "pack:2 [numa(memory=64GiB)] l3:1(size=10MiB) l2:4(size=256KiB) l1d:1(size=32KiB) "
        "l1i:1(size=32KiB) core:1 pu:2(indexes=" + ",".join(map(str, pus)) + ")"
    )
    root = synthetic_xml(desc)
    set_machine_infos(root, linux_infos("dtn-tbn-1", "X9DRi-LN4+/X9DR3-LN4+"))
    set_package_infos(root, [
        ("CPUVendor", "GenuineIntel"),
        ("CPUFamilyNumber", "6"),
        ("CPUModelNumber", "45"),
        ("CPUModel", "Intel(R) Xeon(R) CPU E5-2643 0 @ 3.30GHz"),
        ("CPUStepping", "7"),
    ])
    set_cache_assoc(root, {("L3Cache", "0"): 20, ("L2Cache", "0"): 8,
                           ("L1Cache", "1"): 8, ("L1iCache", "2"): 8})
    add_distances(root, [[10, 21], [21, 10]])
    cx3 = "0200 [15b3:1003] [15b3:0050] 00"
    cx3_infos = [("PCIVendor", "Mellanox Technologies"),
                 ("PCIDevice", "MT27500 Family [ConnectX-3]")]
    root_port = "0604 [8086:3c04] [0000:0000] 07"
    rp_infos = [("PCIVendor", "Intel Corporation"),
                ("PCIDevice", "Xeon E5/Core i7 IIO PCI Express Root Port 2a")]
    p3700 = "0108 [8086:0953] [8086:3703] 01"
    attach_io(root, 0, host_bridge(0x00, 0x07, [
        bridge("0000:00:02.0", root_port, 0x03, 0x03, "7.876923", rp_infos, [
            pci("0000:03:00.0", cx3, "7.876923", cx3_infos, [
                osdev("eth0", OSDEV_NETWORK, [("Address", "e4:1d:2d:7a:10:40"), ("Port", "1"),
                                              ("LinkSpeedMbps", "40000")]),
                osdev("mlx4_0", OSDEV_OPENFABRICS, [("NodeGUID", "e41d:2d03:007a:1040"),
                                                    ("SysImageGUID", "e41d:2d03:007a:1043"),
                                                    ("Port1State", "4"),
                                                    ("Port1LinkLayer", "Ethernet")]),
            ]),
        ]),
    ]))
    attach_io(root, 1, host_bridge(0x80, 0x87, [
        bridge("0000:80:02.0", root_port, 0x82, 0x82, "7.876923", rp_infos, [
            pci("0000:82:00.0", cx3, "7.876923", cx3_infos, [
                osdev("eth1", OSDEV_NETWORK, [("Address", "e4:1d:2d:7a:10:c0"), ("Port", "1"),
                                              ("LinkSpeedMbps", "40000")]),
                osdev("mlx4_1", OSDEV_OPENFABRICS, [("NodeGUID", "e41d:2d03:007a:10c0"),
                                                    ("SysImageGUID", "e41d:2d03:007a:10c3"),
                                                    ("Port1State", "4"),
                                                    ("Port1LinkLayer", "Ethernet")]),
            ]),
        ]),
        bridge("0000:80:03.0", "0604 [8086:3c08] [0000:0000] 07", 0x84, 0x84, "3.938462",
               [("PCIVendor", "Intel Corporation"),
                ("PCIDevice", "Xeon E5/Core i7 IIO PCI Express Root Port 3a")], [
            pci("0000:84:00.0", p3700, "3.938462",
                [("PCIVendor", "Intel Corporation"),
                 ("PCIDevice", "PCIe Data Center SSD")], [
                osdev("nvme0n1", OSDEV_BLOCK, [("Size", "1562813784"), ("SectorSize", "512"),
                                               ("LinuxDeviceID", "259:0"),
                                               ("Model", "INTEL SSDPEDMD016T4"),
                                               ("SerialNumber", "CVFT4000000001P6DGN")],
                      subtype="Disk"),
            ]),
        ]),
    ]))
    renumber_gp_index(root)
    write(root, "dtn-2x-e5-2643-2nic.xml")


def epyc():
    """2x AMD EPYC 7542 in NPS4: 4 nodes/socket, 8 cores/node, 2 threads/core."""
    # Linux numbering: first threads 0-31 socket 0, 32-63 socket 1, siblings +64.
    pus = [t * 64 + p * 32 + g * 8 + x * 4 + c
           for p in range(2) for g in range(4) for x in range(2) for c in range(4)
           for t in range(2)]
    desc = (
        "pack:2 group:4 [numa(memory=32GiB)] l3:2(size=16MiB) l2:4(size=512KiB) "
        "l1d:1(size=32KiB) l1i:1(size=32KiB) core:1 pu:2(indexes=" + ",".join(map(str, pus)) + ")"
    )
    root = synthetic_xml(desc)
    set_machine_infos(root, linux_infos("epyc-dtn-1", "PowerEdge R7525"))
    set_package_infos(root, [
        ("CPUVendor", "AuthenticAMD"),
        ("CPUFamilyNumber", "23"),
        ("CPUModelNumber", "49"),
        ("CPUModel", "AMD EPYC 7542 32-Core Processor"),
        ("CPUStepping", "0"),
    ])
    set_cache_assoc(root, {("L3Cache", "0"): 16, ("L2Cache", "0"): 8,
                           ("L1Cache", "1"): 8, ("L1iCache", "2"): 8})
    matrix = [[10 if a == b else 12 if a // 4 == b // 4 else 32 for b in range(8)]
              for a in range(8)]
    add_distances(root, matrix)
    amd_rp = "0604 [1022:1483] [0000:0000] 00"
    amd_rp_infos = [("PCIVendor", "Advanced Micro Devices, Inc. [AMD]"),
                    ("PCIDevice", "Starship/Matisse GPP Bridge")]
    attach_io(root, 1, host_bridge(0x40, 0x5f, [
        bridge("0000:40:03.1", amd_rp, 0x41, 0x41, "15.753846", amd_rp_infos, [
            pci("0000:41:00.0", "0200 [15b3:1017] [15b3:0020] 00", "15.753846",
                [("PCIVendor", "Mellanox Technologies"),
                 ("PCIDevice", "MT27800 Family [ConnectX-5]")], [
                osdev("ens1f0", OSDEV_NETWORK, [("Address", "b8:59:9f:3e:21:0a"),
                                                ("Port", "1"),
                                                ("LinkSpeedMbps", "100000")]),
                osdev("mlx5_0", OSDEV_OPENFABRICS, [("NodeGUID", "b859:9f03:003e:210a"),
                                                    ("SysImageGUID", "b859:9f03:003e:210a"),
                                                    ("Port1State", "4"),
                                                    ("Port1LinkLayer", "Ethernet")]),
            ]),
        ]),
    ]))
    attach_io(root, 5, host_bridge(0xa0, 0xbf, [
        bridge("0000:a0:03.1", amd_rp, 0xa1, 0xa1, "15.753846", amd_rp_infos, [
            pci("0000:a1:00.0", "0108 [144d:a824] [1028:2128] 00", "15.753846",
                [("PCIVendor", "Samsung Electronics Co Ltd"),
                 ("PCIDevice", "NVMe SSD Controller PM173X")], [
                osdev("nvme0n1", OSDEV_BLOCK, [("Size", "3750738264"), ("SectorSize", "512"),
                                               ("LinuxDeviceID", "259:0"),
                                               ("Model", "Dell Ent NVMe PM1733a RI 3.84TB"),
                                               ("SerialNumber", "S6CRNA0R000001")],
                      subtype="Disk"),
            ]),
        ]),
    ]))
    renumber_gp_index(root)
    write(root, "epyc-2s-nps4-nic-node1.xml")


def opteron():
    """4x AMD Opteron 6272 (seed 004): 2 nodes/socket, 8 cores/node (4 modules), no SMT."""
    desc = (
        "pack:4 l3:2(size=8MiB) [numa(memory=32GiB)] l2:4(size=2MiB) l1i:1(size=64KiB) "
        "core:2 l1d:1(size=16KiB) pu:1"
    )
    root = synthetic_xml(desc)
    set_machine_infos(root, linux_infos("jericho", "S8812"))
    set_package_infos(root, [
        ("CPUVendor", "AuthenticAMD"),
        ("CPUFamilyNumber", "21"),
        ("CPUModelNumber", "1"),
        ("CPUModel", "AMD Opteron(TM) Processor 6272"),
        ("CPUStepping", "2"),
    ])
    set_cache_assoc(root, {("L3Cache", "0"): 64, ("L2Cache", "0"): 16,
                           ("L1Cache", "1"): 4, ("L1iCache", "2"): 2})
    # numactl --hardware of a 4-socket G34 (HyperTransport) box: 16 = one hop, 22 = two.
    add_distances(root, [
        [10, 16, 16, 22, 16, 22, 16, 22],
        [16, 10, 16, 22, 22, 16, 22, 16],
        [16, 16, 10, 16, 16, 16, 16, 22],
        [22, 22, 16, 10, 16, 16, 22, 16],
        [16, 22, 16, 16, 10, 16, 16, 16],
        [22, 16, 16, 16, 16, 10, 22, 22],
        [16, 22, 16, 22, 16, 22, 10, 16],
        [22, 16, 22, 16, 16, 22, 16, 10],
    ])
    sr5690_infos = [("PCIVendor", "Advanced Micro Devices, Inc. [AMD/ATI]"),
                    ("PCIDevice", "RD890 PCI to PCI bridge (PCI express gpp port B)")]
    attach_io(root, 0, host_bridge(0x00, 0x05, [
        bridge("0000:00:02.0", "0604 [1002:5a16] [0000:0000] 00", 0x01, 0x01, "1.000000",
               sr5690_infos, [
            pci("0000:01:00.0", "0200 [8086:10c9] [10f1:2229] 01", "1.000000",
                [("PCIVendor", "Intel Corporation"),
                 ("PCIDevice", "82576 Gigabit Network Connection")], [
                osdev("eth0", OSDEV_NETWORK, [("Address", "00:e0:81:c7:3a:10"),
                                              ("LinkSpeedMbps", "1000")]),
            ]),
        ]),
        bridge("0000:00:0b.0", "0604 [1002:5a1f] [0000:0000] 00", 0x04, 0x04, "4.000000",
               sr5690_infos, [
            pci("0000:04:00.0", "0104 [1000:005b] [1000:9276] 05", "4.000000",
                [("PCIVendor", "Broadcom / LSI"),
                 ("PCIDevice", "MegaRAID SAS 2208 [Thunderbolt]")], [
                osdev("sda", OSDEV_BLOCK, [("Size", "2000472768"), ("SectorSize", "512"),
                                           ("LinuxDeviceID", "8:0"),
                                           ("Vendor", "LSI"), ("Model", "MR9265-8i"),
                                           ("Revision", "3.46")],
                      subtype="Disk"),
            ]),
        ]),
    ]))
    renumber_gp_index(root)
    write(root, "opteron-6272-4s-8n.xml")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    dtn()
    epyc()
    opteron()
