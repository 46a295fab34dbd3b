"""Redaction you can trust with a ticket: a redacted snapshot of THIS machine, searched for every
identifier the unredacted one (and the machine itself) holds.

Identifier kinds searched: host names (short and fully qualified), IPv4 and IPv6 addresses of every
interface (link-local included: its interface identifier is often the MAC), MAC addresses, IB
GUIDs and GIDs, IPoIB hardware addresses, GPU UUIDs and any other UUID (filesystem UUIDs in the
kernel log), serial numbers ("SerialNumber:" in the kernel log), and user names of accounts
(/etc/passwd, uid >= 1000) wherever they occur.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import tarfile

import psutil
import pytest

from cli_runner import run

UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
GUID = re.compile(r"\b[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}\b")
SERIAL = re.compile(r"SerialNumber:\s*(\S{4,})")


def _text(path) -> str:
    out = []
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if m.isfile():
                out.append(tar.extractfile(m).read().decode("utf-8", "replace"))
    return "\n".join(out)


def _identifiers(plain: str) -> dict[str, set[str]]:
    ids: dict[str, set[str]] = {"host": set(), "ipv4": set(), "ipv6": set(), "mac": set(), "uuid": set(),
                                "guid": set(), "serial": set(), "user": set()}
    for name in {socket.gethostname(), socket.getfqdn(), socket.gethostname().split(".")[0]}:
        if len(name) >= 2 and name != "localhost":
            ids["host"].add(name)
    for nic, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            value = a.address.split("%")[0]
            if a.family == socket.AF_INET and not value.startswith("127."):
                ids["ipv4"].add(value)
            elif a.family == socket.AF_INET6:
                ip = ipaddress.IPv6Address(value)
                if not (ip.is_loopback or ip.is_unspecified):
                    ids["ipv6"].add(str(ip))
            elif getattr(psutil, "AF_LINK", None) == a.family and value.strip("0:"):
                ids["mac"].add(value.lower())
    ids["uuid"] |= {u.lower() for u in UUID.findall(plain)}
    ids["guid"] |= {g for g in GUID.findall(plain) if g.replace(":", "").strip("0") and g.replace(":", "").strip("f")}
    ids["serial"] |= set(SERIAL.findall(plain))
    try:
        for line in open("/etc/passwd", encoding="utf-8", errors="replace"):
            parts = line.split(":")
            if len(parts) > 2 and parts[2].isdigit() and 1000 <= int(parts[2]) < 65534 and len(parts[0]) >= 3:
                ids["user"].add(parts[0])
    except OSError:
        pass
    return ids


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    d = tmp_path_factory.mktemp("snaps")
    plain, red = d / "plain.snap.tar.gz", d / "red.snap.tar.gz"
    for path, extra in ((plain, []), (red, ["--redact"])):
        code, out, err = run("snapshot", "-o", str(path), "--window", "0", *extra)
        assert code == 0, err
    return _text(plain), _text(red)


def test_no_identifier_of_this_machine_survives_redaction(snapshots):
    plain, red = snapshots
    ids = _identifiers(plain)
    assert ids["host"] and (ids["ipv4"] or ids["ipv6"])  # there is something to hide on any machine
    def found(v: str) -> bool:  # whole words: host "vm" is not a leak inside "kvm"
        return re.search(r"(?<![A-Za-z0-9_.:-])" + re.escape(v) + r"(?![A-Za-z0-9_-])", red, re.IGNORECASE) is not None

    leaks = {kind: sorted(v for v in values if found(v)) for kind, values in ids.items()}
    assert {k: v for k, v in leaks.items() if v} == {}


def test_link_local_ipv6_does_not_give_the_mac_back(snapshots):
    plain, red = snapshots
    for mac in _identifiers(plain)["mac"]:
        b = bytes.fromhex(mac.replace(":", ""))
        eui = "%02x%02x:%02xff:fe%02x:%02x%02x" % (b[0] ^ 2, b[1], b[2], b[3], b[4], b[5])
        assert eui.lstrip("0") not in red.lower()


def test_only_the_kernel_log_lines_a_probe_reads_are_kept(snapshots):
    plain, red = snapshots
    assert '"redacted_lines"' in red
    assert "BIOS-e820" not in red and "Command line:" not in red


def test_each_kind_is_redacted_by_what_it_is():
    """SYNTHESIZED strings in the real formats of each source."""
    from ccdiag.redact import Redactor

    r = Redactor()
    # IPoIB hardware address (/sys/class/net/ib0/address): its port GUID gets the GUID's pseudonym
    hw = r.text("00:00:10:87:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:da:63:42")
    guid = r.text("a088:c203:00da:6342")
    assert hw.replace(":", "").endswith(guid.replace(":", "")) and "a088" not in hw
    assert r.text("Node GUID: 0xa088c20300da6342") == "Node GUID: 0x" + guid.replace(":", "")
    # a 64-bit number that is not said to be a GUID is an address: untouched
    e820 = "BIOS-e820: [mem 0x0000000100000000-0x000000407fffffff] usable"
    assert r.text(e820) == e820
    # IPv6 of every kind; an IPv4-mapped one keeps its IPv4 shape
    assert r.text("fd00::2") == "2001:db8::1" and r.text("fe80::a288:c2ff:fe03:1%ib0").startswith("fe80::200:ff:fe00:")
    assert r.text("::ffff:10.99.91.59").startswith("::ffff:192.0.2.")
    assert r.text("::1 and 12:30:45") == "::1 and 12:30:45"


def test_a_redacted_sample_still_gives_the_same_verdict(tmp_path):
    from conftest import REPO

    sample = REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"
    red = tmp_path / "red.snap.tar.gz"
    assert run("snapshot", "--replay", str(sample), "--redact", "-o", str(red))[0] == 0
    a = run("check", "--replay", str(sample), "-q")[1].splitlines()
    b = run("check", "--replay", str(red), "-q")[1].splitlines()
    assert len(a) == len(b) and a[0].split("(node")[0] == b[0].split("(node")[0]
    assert [l.split()[:2] for l in a[1:]] == [l.split()[:2] for l in b[1:]]  # same checks, same order
