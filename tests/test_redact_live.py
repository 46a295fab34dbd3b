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
    from ccdiag.report.redact import Redactor

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


#: SYNTHESIZED values in the forms PXE, dracut and systemd put on a kernel command line (the
#: forms are the documented ones: PXELINUX's BOOTIF=<arp type>-<mac>, dracut's ifname=<name>:<mac> and
#: ip=<client>:<server>:<gw>:<mask>:<hostname>:<iface>:<autoconf>, udev's enx<mac> names,
#: systemd.machine_id=); none is a real machine's
PXE_CMDLINE = ("BOOT_IMAGE=/vmlinuz-5.15.0 root=UUID=0d6c2f1e-8a7b-4c5d-9e0f-1a2b3c4d5e6f ro iommu=pt "
               "BOOTIF=01-02-fc-1a-2b-3c ifname=bootnet:02:FC:1A:2B:3C:4E "
               "ip=10.44.7.21::10.44.7.254:255.255.255.0:node07.cluster.example.org:bootnet:none "
               "nameserver=10.44.0.53 rd.neednet=1 wwid=0002fc1a2b3d net.ifnames=1 ip=enx0002fc1a2b3e:dhcp "
               "hwaddr=02:fc:1a:2b:3c:40 systemd.machine_id=3f2a9c1e7b6d4a0f8e2c1b3a5d7f9e0c "
               "rd.iscsi.initiator=iqn.2019-04.org.example.cluster:node07 intel_iommu=on pcie_acs_override=downstream")
PXE_SECRETS = ["02-fc-1a-2b-3c", "02:fc:1a:2b:3c:4e", "02fc1a2b3c4e", "0002fc1a2b3d", "0002fc1a2b3e", "02:fc:1a:2b:3c:40",
               "3f2a9c1e7b6d4a0f8e2c1b3a5d7f9e0c", "cluster.example.org", "node07", "10.44.7.21", "10.44.7.254",
               "10.44.0.53"]


def test_pxe_dracut_and_systemd_identities_never_leave_the_site(tmp_path):
    """The degraded sample with a PXE/dracut-booted node's identity written where a real one puts it:
    /proc/cmdline, the kernel log's "Kernel command line:", /etc/machine-id, and a command's output."""
    from conftest import REPO

    from ccdiag.report.redact import redact
    from ccdiag.host.snapshot import SnapshotData

    snap = SnapshotData.load(str(REPO / "samples" / "hgx-h100-8gpu-degraded.snap.tar.gz"))
    snap.put_file("/proc/cmdline", PXE_CMDLINE + "\n")
    snap.put_file("/etc/machine-id", "3f2a9c1e7b6d4a0f8e2c1b3a5d7f9e0c\n")
    snap.kmsg[0]["lines"].append("5,3,0,-;Kernel command line: " + PXE_CMDLINE)
    snap.commands.append({"argv": ["journalctl", "-k", "-b"], "rc": 0, "stderr": "", "duration_s": 0.1,
                          "timed_out": False, "error": None, "epoch": 0,
                          "stdout": ("kernel: Command line: " + PXE_CMDLINE + "\n"
                                     "kernel: mlx5_core 0000:19:00.0 enx0002fc1a2b3e: renamed from eth0\n"
                                     "dracut: ifname=bootnet:02:FC:1A:2B:3C:4E, BOOTIF=01-02-fc-1a-2b-3c\n"
                                     "systemd[1]: Hostname set to <node07.cluster.example.org>.\n")})
    red, counts = redact(snap)
    path = tmp_path / "red.snap.tar.gz"
    red.save(str(path))
    text = _text(path).lower()
    assert [s for s in PXE_SECRETS if s.lower() in text] == []
    # what a probe reads stays: the IOMMU settings and the ACS override
    assert red.files[0]["/proc/cmdline"].decode() == "iommu=pt intel_iommu=on pcie_acs_override=downstream\n"
    assert {"mac", "domain"} <= set(counts)
    assert "/etc/machine-id" not in red.files[0]  # no check reads it: dropped, not pseudonymised
    # the same MAC in three spellings is one pseudonym, so a redacted ticket still reads consistently
    out = next(c for c in red.commands if c["argv"][0] == "journalctl")["stdout"]
    macs = re.findall(r"enx([0-9a-f]{12})", out)
    assert macs and all(m.startswith("02") for m in macs)


def test_identifier_forms_keep_their_shape():
    """SYNTHESIZED strings: each form redacted in its own spelling, and look-alikes left alone."""
    from ccdiag.report.redact import Redactor

    r = Redactor()
    assert re.fullmatch(r"BOOTIF=01(-[0-9a-f]{2}){6}", r.text("BOOTIF=01-02-fc-1a-2b-3c-4d"))
    assert r.text("ifname=bootnet:02:FC:1A:2B:3C:4D").startswith("ifname=bootnet:02:00:00:00:")
    # dashed and colon spellings of one MAC share the pseudonym
    assert r.text("02-fc-1a-2b-3c-4d").replace("-", ":") == r.text("02:fc:1a:2b:3c:4d")
    assert r.text("systemd.machine_id=3f2a9c1e7b6d4a0f8e2c1b3a5d7f9e0c") != "systemd.machine_id=3f2a9c1e7b6d4a0f8e2c1b3a5d7f9e0c"
    assert "example.org" not in r.text("ip=10.1.1.1::10.1.1.254:255.255.255.0:n1.hpc.example.org:eth0:none")
    # not identifiers: module and library names, twelve-digit counters, hex addresses, versions
    for same in ("mlx5_core.ko", "libnvidia-ml.so.1", "port_rcv_data 123456789012", "0x0000aabbccddeeff",
                 "570.133.20", "ccdiag.probes.kmsg", "Gen5 x16"):
        assert r.text(same) == same
