"""Write fabric.txt: an `ibnetdiscover` capture of a small two-level NDR/HDR fabric.

    python tests/data/ibnetdiscover/make_fabric.py

The text follows infiniband-diags' default topology-file format byte for byte in shape
(record order, tabs, GUID forms, comments); the fabric is made up:

- spine01, spine02 (Quantum-2, 64 ports); every leaf has two cables to each spine;
- leaf01: gpu01, gpu02 (8 HCAs each, ports 1-16); leaf02: gpu03, gpu04;
- leaf03 (HDR): cn01..cn04; a fourth leaf with the factory description
  ("Quantum-2 Mellanox Technologies"): cn05..cn08 and ib09 (whose mlx5_1 is down, so only
  mlx5_0 is cabled, as in tests/data/sysfs/portdown).

gpu01's GUIDs are those of tests/data/sysfs/gpu8, ib09's those of tests/data/sysfs/portdown.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def guid(host: int, hca: int) -> str:
    return f"b8599f03{host:04x}{hca:02x}00"


def leaf_guid(i: int) -> str:
    return f"b8599f0300e1{i:02x}00"


def spine_guid(i: int) -> str:
    return f"b8599f0300f1{i:02x}00"


LEAF_DESC = {
    1: "MF0;leaf01:MQM9700/U1",
    2: "MF0;leaf02:MQM9700/U1",
    3: "MF0;leaf03:MQM8700/U1",
    4: "Quantum-2 Mellanox Technologies",
}
SPINE_DESC = {1: "MF0;spine01:MQM9700/U1", 2: "MF0;spine02:MQM9700/U1"}
LEAF_LID = {1: 2, 2: 3, 3: 4, 4: 5}
SPINE_LID = {1: 1, 2: 6}
SPEED = {1: "4xNDR", 2: "4xNDR", 3: "4xHDR", 4: "4xNDR"}


def hosts() -> list[tuple[str, int, int, int, int]]:
    """(name, host number, HCAs, leaf, first leaf port)."""
    out = [
        ("gpu01", 1, 8, 1, 1),
        ("gpu02", 2, 8, 1, 9),
        ("gpu03", 3, 8, 2, 1),
        ("gpu04", 4, 8, 2, 9),
    ]
    out += [(f"cn{i:02d}", 0x10 + i, 1, 3, i) for i in range(1, 5)]
    out += [(f"cn{i:02d}", 0x10 + i, 1, 4, i - 4) for i in range(5, 9)]
    out.append(("ib09", 9, 1, 4, 5))
    return out


def main() -> None:
    lid = 16
    ca_lid: dict[str, int] = {}
    leaf_ports: dict[int, list[str]] = {i: [] for i in LEAF_DESC}
    ca_records: list[str] = []
    for name, num, hcas, leaf, first in hosts():
        for k in range(hcas):
            g = guid(num, k)
            ca_lid[g] = lid
            port = first + k
            desc = f"{name} mlx5_{k}"
            leaf_ports[leaf].append(
                f'[{port}]\t"H-{g}"[1]({g.lstrip("0")}) \t\t# "{desc}" lid {lid} {SPEED[leaf]}'
            )
            ca_records.append(
                "\n".join(
                    [
                        "vendid=0x2c9",
                        "devid=0x1021" if SPEED[leaf] == "4xNDR" else "devid=0x101b",
                        f"sysimgguid=0x{g}",
                        f"caguid=0x{g}",
                        f'Ca\t1 "H-{g}"\t\t# "{desc}"',
                        f'[1]({g.lstrip("0")}) \t"S-{leaf_guid(leaf)}"[{port}]\t\t# lid {lid} '
                        f'lmc 0 "{LEAF_DESC[leaf]}" lid {LEAF_LID[leaf]} {SPEED[leaf]}',
                    ]
                )
            )
            lid += 1
    records: list[str] = []
    spine_ports: dict[int, list[str]] = {1: [], 2: []}
    for leaf in LEAF_DESC:
        for s in (1, 2):
            for cable in range(2):
                lport = 48 + 2 * (s - 1) + cable + 1
                sport = 2 * (leaf - 1) + cable + 1
                leaf_ports[leaf].append(
                    f'[{lport}]\t"S-{spine_guid(s)}"[{sport}]\t\t# "{SPINE_DESC[s]}" '
                    f"lid {SPINE_LID[s]} 4xNDR"
                )
                spine_ports[s].append(
                    f'[{sport}]\t"S-{leaf_guid(leaf)}"[{lport}]\t\t# "{LEAF_DESC[leaf]}" '
                    f"lid {LEAF_LID[leaf]} 4xNDR"
                )
    for s, desc in SPINE_DESC.items():
        g = spine_guid(s)
        records.append(
            "\n".join(
                [
                    "vendid=0x2c9",
                    "devid=0xd2f2",
                    f"sysimgguid=0x{g}",
                    f"switchguid=0x{g}({g})",
                    f'Switch\t64 "S-{g}"\t\t# "{desc}" enhanced port 0 lid {SPINE_LID[s]} lmc 0',
                    *sorted(spine_ports[s], key=lambda t: int(t[1 : t.index("]")])),
                ]
            )
        )
    for leaf, desc in LEAF_DESC.items():
        g = leaf_guid(leaf)
        records.append(
            "\n".join(
                [
                    "vendid=0x2c9",
                    "devid=0xd2f2" if SPEED[leaf] == "4xNDR" else "devid=0xcf08",
                    f"sysimgguid=0x{g}",
                    f"switchguid=0x{g}({g})",
                    f'Switch\t{64 if SPEED[leaf] == "4xNDR" else 40} "S-{g}"\t\t# "{desc}" '
                    f"enhanced port 0 lid {LEAF_LID[leaf]} lmc 0",
                    *sorted(leaf_ports[leaf], key=lambda t: int(t[1 : t.index("]")])),
                ]
            )
        )
    header = "\n".join(
        [
            "#",
            "# Topology file: generated on Tue Mar  4 10:12:55 2025",
            "#",
            f"# Initiated from node {guid(1, 0)} port {guid(1, 0)}",
        ]
    )
    text = header + "\n\n" + "\n\n".join(records + ca_records) + "\n"
    (HERE / "fabric.txt").write_text(text)


if __name__ == "__main__":
    main()
