"""Redact a snapshot before it leaves the site: keep only what the checks read, pseudonymise identities.

What is kept is decided by one allow-list (:mod:`ccdiag.report.allowlist`): environment variables,
configuration-file lines, DMI fields and NVML record fields not named there are dropped, and every
drop is listed (:class:`Dropped`, printed by ``ccdiag snapshot --redact``) so the sender can review
it. A kept value that looks like a secret is dropped anyway (:mod:`ccdiag.report.secrets`), and
credentials inside free text (command outputs, kept kernel-log lines) are cut out.

The same original always maps to the same pseudonym within one snapshot, so a redacted snapshot
still diagnoses exactly like the original (GPU 3's UUID in NVML, in the kernel log and in a command
output stay the same pseudonym; two ports with different GUIDs stay different). Pseudonyms come from
ranges reserved for documentation (192.0.2.0/24, 2001:db8::/32) or locally administered MACs, so they
can never be mistaken for a real machine; an address in a subnet an interface names keeps its place
in a pseudonym subnet of the same size in 198.18.0.0/15 (reserved for benchmarking), so rails that
share a subnet still share one and rails in their own stay apart.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ccdiag.host.snapshot import SnapshotData
from ccdiag.report import allowlist
from ccdiag.report.secrets import SECRET_VALUE, looks_secret


def scrub(text: str) -> str:
    """``text`` with every credential form (:data:`ccdiag.report.secrets.SECRET_VALUE`) cut out."""
    return SECRET_VALUE.sub("[REDACTED]", text) if SECRET_VALUE.search(text) else text

IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
MAC = re.compile(r"(?<![0-9a-fA-F:])(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}(?![0-9a-fA-F:])")
IB_GUID = re.compile(r"(?<![0-9a-fA-F:])(?:[0-9a-fA-F]{4}:){3}[0-9a-fA-F]{4}(?![0-9a-fA-F:])")
#: a 64-bit hex number is a GUID only where the text says so ("Node GUID: 0x..."); elsewhere
#: (the e820 memory map, register dumps) it is an address and stays as it is
HEX_GUID = re.compile(r"(?i)(guid\W{0,3}\s*)(0x[0-9a-f]{16})\b")
#: an IPoIB hardware address: 4 bytes of flags and QPN, then the port GID (prefix + port GUID)
IPOIB_HW = re.compile(r"(?<![0-9a-fA-F:])((?:[0-9a-fA-F]{2}:){4})((?:[0-9a-fA-F]{2}:){8})((?:[0-9a-fA-F]{2}:){7}"
                      r"[0-9a-fA-F]{2})(?![0-9a-fA-F:])")
#: an IPv6 candidate (validated by ipaddress): groups with colons, optionally a dotted IPv4 tail and a zone
IPV6 = re.compile(r"(?<![0-9A-Za-z:.])(?=[0-9A-Fa-f:]*:[0-9A-Fa-f]*:)((?:[0-9A-Fa-f]{0,4}:){2,7}"
                  r"(?:[0-9A-Fa-f]{0,4}|\d{1,3}(?:\.\d{1,3}){3}))(%[\w.-]+)?(?![0-9A-Za-z:.])")
GPU_UUID = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# a GID is eight groups; the upper half is the subnet prefix, the lower half the port GUID
GID = re.compile(r"(?<![0-9a-fA-F:])(?:[0-9a-fA-F]{4}:){7}[0-9a-fA-F]{4}(?![0-9a-fA-F:])")

_KEEP_V4 = {"0.0.0.0", "127.0.0.1", "255.255.255.255"}
#: where subnets' pseudonyms are placed (see Redactor._subnet)
_PSEUDO_SUBNETS = ipaddress.IPv4Network("198.18.0.0/15")


def _looks_v4(value: str) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def _learn_networks(snap: SnapshotData) -> list[ipaddress.IPv4Network]:
    """The IPv4 subnets the interfaces' addresses and netmasks name (/15 to /30; wider ones and
    single hosts tell nothing a check reads)."""
    nets = set()
    for facts in snap.net.values():
        addrs = facts.get("addrs") if isinstance(facts, dict) else None
        for items in (addrs or {}).values():
            for a in items if isinstance(items, list) else ():
                if not isinstance(a, dict) or a.get("family") not in ("inet", 2, "AF_INET"):
                    continue
                try:
                    net = ipaddress.IPv4Network(f"{a.get('address')}/{a.get('netmask')}", strict=False)
                except (ValueError, TypeError):
                    continue
                if 15 <= net.prefixlen <= 30 and not (net.is_loopback or net.is_link_local):
                    nets.add(net)
    return sorted(nets, key=lambda n: (n.prefixlen, int(n.network_address)))

#: a MAC written with dashes (PXE's ``BOOTIF=01-02-fc-..``: the first group is the ARP hardware type)
DASHED_MAC = re.compile(r"(?<![0-9a-fA-F-])((?:[0-9a-fA-F]{2}-)?)((?:[0-9a-fA-F]{2}-){5}[0-9a-fA-F]{2})(?![0-9a-fA-F-])")
#: a MAC right after "name:" (dracut's ``ifname=bootnet:02:fc:..``); the name must not be hex itself
NAMED_MAC = re.compile(r"(?<![0-9A-Za-z_.:-])([0-9A-Za-z_.-]*[g-zG-Z_.-][0-9A-Za-z_.-]*:)"
                       r"((?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2})(?![0-9a-fA-F:])")
#: a MAC without separators: udev's ``enx0002fc123456`` names, ``wwid=``/``hwaddr=`` values. Only with a
#: hex letter in it: twelve decimal digits are a counter far more often than a MAC
BARE_MAC = re.compile(r"(?:(?<=enx)|(?<![0-9A-Za-z_.:/-]))(?=[0-9]*[a-fA-F])([0-9a-fA-F]{12})(?![0-9A-Za-z_.-])")
#: a systemd/D-Bus machine id (``/etc/machine-id``, ``systemd.machine_id=``): 32 lower-case hex digits
MACHINE_ID = re.compile(r"(?<![0-9A-Za-z_.:/-])[0-9a-f]{32}(?![0-9A-Za-z_.:-])")
#: a DNS name under a top-level domain seen on clusters (public, or an internal convention); a
#: country code alone is not enough (``nvidia.ko``, ``libc.so``), those domains are learnt instead
DNS_NAME = re.compile(r"(?<![\w.@/-])((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
                      r"(?i:com|org|net|edu|gov|mil|int|info|biz|io|ai|cloud|local|localdomain|lan|home|corp|"
                      r"internal|intranet|private|cluster|hpc|example|test))(?![\w-]|\.[A-Za-z0-9])")
#: reserved for documentation (RFC 2606): a pseudonym can never be a real domain
_PSEUDO_DOMAIN = re.compile(r"(?i)(?:^|\.)(?:domain-\d+\.)?(?:example\.invalid|invalid)$")

#: kernel command-line parameters a probe reads (IOMMU mode, ACS override, PCIe settings); every
#: other one is dropped: on PXE/dracut nodes the command line carries MACs, addresses, host and
#: domain names, iSCSI targets and machine ids
CMDLINE_KEEP = ("iommu", "iommu.passthrough", "iommu.strict", "intel_iommu", "amd_iommu", "pcie_acs_override",
                "pci", "pcie_aspm", "pcie_ports")
CMDLINE_LINE = re.compile(r"((?:Kernel )?[Cc]ommand line:[ \t]*)([^\n]*)")


def kernel_cmdline_kept(cmdline: str) -> str:
    """Only the parameters of ``cmdline`` that a probe reads (:data:`CMDLINE_KEEP`), in order."""
    kept = [a for a in cmdline.split() if a.split("=", 1)[0] in CMDLINE_KEEP]
    return " ".join(kept)


class Redactor:
    """Collects originals and hands out stable pseudonyms."""

    def __init__(self, literals: list | None = None, reserved: set[str] | None = None,
                 networks: list | None = None) -> None:
        self.maps: dict[str, dict[str, str]] = {}
        #: the IPv4 subnets the node's interfaces name (most specific first): an address in one
        #: keeps its place in a pseudonym subnet of the same size (see :meth:`ipv4`)
        self.networks = sorted(networks or [], key=lambda n: -n.prefixlen)
        self._subnets: dict[ipaddress.IPv4Network, ipaddress.IPv4Network | None] = {}
        self._reserved_in_range: list[ipaddress.IPv4Address] | None = None
        #: (original, kind, pseudonym maker) for free-text identifiers such as host names
        self.literals = list(literals or [])
        #: values that must never be handed out as pseudonyms: the originals of this snapshot (a
        #: machine may really use a documentation address; its pseudonym must not look the same)
        self.reserved = {v.lower() for v in (reserved or ())}
        self._counter: dict[str, int] = {}

    def _pseudo(self, kind: str, original: str, make: Callable[[int], str]) -> str:
        table = self.maps.setdefault(kind, {})
        if original not in table:
            n = self._counter.get(kind, 0)
            while True:
                n += 1
                candidate = make(n)
                if candidate.lower() not in self.reserved:
                    break
            self._counter[kind] = n
            table[original] = candidate
        return table[original]

    def _literal(self, kind: str, word: str, make: Callable[[int], str]) -> Callable[[re.Match[str]], str]:
        """A ``re.sub`` replacement that writes ``word``'s pseudonym wherever the word stands."""
        return lambda _m: self._pseudo(kind, word, make)

    def ipv4(self, m: re.Match) -> str:
        s = m.group(0)
        try:
            ip = ipaddress.IPv4Address(s)
        except ValueError:
            return s  # "999.1.1.1" is not an address: leave it
        if s in _KEEP_V4 or ip.is_loopback or s.startswith("255.") or ip.is_link_local:
            return s
        for net in self.networks:
            if ip in net:
                fake = self._subnet(net)
                if fake is not None:
                    return self._pseudo("ipv4", s, lambda _n: str(fake.network_address + (int(ip) - int(net.network_address))))
                break
        return self._pseudo("ipv4", s, lambda n: f"192.0.2.{n % 254 + 1}" if n < 254 else f"198.51.100.{n % 254 + 1}")

    def _subnet(self, net: ipaddress.IPv4Network) -> ipaddress.IPv4Network | None:
        """The pseudonym of subnet ``net``: a block of its size in 198.18.0.0/15 (reserved for
        benchmarking, RFC 2544: never a real host's), the next free one; None when none is left.

        Why: a check judges whether two rails share a subnet (strict reverse-path filtering drops
        the replies of rails that do). Addresses handed out one by one from a /24 would put every
        rail in one subnet and turn a passing node into a failing one."""
        if net in self._subnets:
            return self._subnets[net]
        found = None
        taken = [n for n in self._subnets.values() if n is not None]
        if self._reserved_in_range is None:  # originals that happen to lie in the range (rarely any)
            self._reserved_in_range = [ipaddress.IPv4Address(v) for v in self.reserved
                                       if _looks_v4(v) and ipaddress.IPv4Address(v) in _PSEUDO_SUBNETS]
        for candidate in _PSEUDO_SUBNETS.subnets(new_prefix=net.prefixlen) if net.prefixlen >= 15 else ():
            if any(candidate.overlaps(t) for t in taken) or any(a in candidate for a in self._reserved_in_range):
                continue
            found = candidate
            break
        self._subnets[net] = found
        return found

    def mac(self, m: re.Match) -> str:
        s = m.group(0)
        if s.replace(":", "").strip("0") == "" or s.lower() == "ff:ff:ff:ff:ff:ff":
            return s
        return self._pseudo("mac", s.lower(), lambda n: "02:00:00:00:%02x:%02x" % (n >> 8 & 0xFF, n & 0xFF))

    def guid(self, m: re.Match) -> str:
        s = m.group(0)
        if s.replace(":", "").strip("0") == "" or s.lower().replace(":", "").strip("f") == "":
            return s  # all zeros or all ones: a mask or an unset value, not a GUID
        return self._pseudo("guid", s.lower(), lambda n: "0200:0000:0000:%04x" % n)

    def hex_guid(self, m: re.Match) -> str:
        s = m.group(2).lower()
        # the same GUID as "a088:c203:00da:6342" elsewhere gets the same pseudonym
        grouped = ":".join(s[2 + i:6 + i] for i in range(0, 16, 4))
        fake = self.guid(_shaped(IB_GUID, grouped)).replace(":", "")
        return m.group(1) + "0x" + fake

    def ipoib_hw(self, m: re.Match) -> str:
        """``00:00:10:87:fe:80:...:a0:88:c2:03:00:da:63:42``: the port GID inside is redacted as a GID."""
        gid_hex = (m.group(2) + m.group(3)).replace(":", "")
        gid = ":".join(gid_hex[i:i + 4] for i in range(0, 32, 4))
        fake = self.gid(_shaped(GID, gid)).replace(":", "")
        return m.group(1) + ":".join(fake[i:i + 2] for i in range(0, 32, 2))

    def ipv6(self, m: re.Match) -> str:
        s, zone = m.group(1), m.group(2) or ""
        groups = s.split(":")
        if len(groups) == 8 and all(len(g) == 4 for g in groups):
            return m.group(0)  # a GID (or an IPv6 written out in full): the GID rule decides
        try:
            ip = ipaddress.IPv6Address(s)
        except ValueError:
            return m.group(0)
        if ip.is_loopback or ip.is_unspecified or ip.is_multicast:
            return m.group(0)
        if ip.ipv4_mapped is not None:
            return "::ffff:" + IPV4.sub(self.ipv4, str(ip.ipv4_mapped)) + zone
        if ip in ipaddress.IPv6Network("2001:db8::/32"):
            return m.group(0)  # already a documentation address
        if ip.is_link_local:
            # the interface identifier of a link-local address is often the MAC (EUI-64)
            return self._pseudo("ipv6", str(ip), lambda n: f"fe80::200:ff:fe00:{n:x}") + zone
        return self._pseudo("ipv6", str(ip), lambda n: f"2001:db8::{n:x}") + zone

    def gid(self, m: re.Match) -> str:
        s = m.group(0).lower()
        groups = s.split(":")
        if s.replace(":", "").strip("0") == "":
            return m.group(0)
        if groups[:6] == ["0000", "0000", "0000", "0000", "0000", "ffff"]:
            # IPv4-mapped RoCE GID: redact the address part like any IPv4
            v4 = ipaddress.IPv4Address(int(groups[6] + groups[7], 16))
            fake = ipaddress.IPv4Address(IPV4.sub(self.ipv4, str(v4)))
            return "0000:0000:0000:0000:0000:ffff:%04x:%04x" % (int(fake) >> 16, int(fake) & 0xFFFF)
        prefix = ":".join(groups[:4])
        low = self.guid(_shaped(IB_GUID, ":".join(groups[4:])))
        if prefix.startswith("fe80"):
            return f"{prefix}:{low}"
        new_prefix = self._pseudo("gidprefix", prefix, lambda n: "2001:0db8:0000:%04x" % n)
        return f"{new_prefix}:{low}"

    def dashed_mac(self, m: re.Match) -> str:
        """``01-02-fc-aa-bb-cc-dd`` keeps its hardware-type prefix; the MAC gets the colon form's pseudonym."""
        fake = self.mac(_shaped(MAC, m.group(2).replace("-", ":")))
        return m.group(1) + fake.replace(":", "-")

    def named_mac(self, m: re.Match) -> str:
        return m.group(1) + self.mac(_shaped(MAC, m.group(2)))

    def bare_mac(self, m: re.Match) -> str:
        s = m.group(1)
        fake = self.mac(_shaped(MAC, ":".join(s[i:i + 2] for i in range(0, 12, 2))))
        return fake.replace(":", "")

    def machine_id(self, m: re.Match) -> str:
        return self._pseudo("machine_id", m.group(0), lambda n: "%020x%012x" % (0, n))

    def dns_name(self, m: re.Match) -> str:
        """``node7.cluster.example.org``: the domain becomes ``domain-N.example.invalid``, a first label
        that is not already a pseudonym becomes a host pseudonym."""
        name = m.group(1)
        if _PSEUDO_DOMAIN.search(name):
            return name
        first, _, domain = name.partition(".")
        if "." not in domain:  # "cluster.local": the whole name is the domain
            return self._pseudo("domain", name.lower(), lambda n: f"domain-{n}.example.invalid")
        host = first if re.fullmatch(r"host-\d+", first) else self._pseudo("host", first, lambda n: f"host-{n}")
        return host + "." + self._pseudo("domain", domain.lower(), lambda n: f"domain-{n}.example.invalid")

    def cmdline(self, m: re.Match) -> str:
        return m.group(1) + kernel_cmdline_kept(m.group(2))

    def text(self, s: str) -> str:
        s = CMDLINE_LINE.sub(self.cmdline, s)
        for word, kind, make in self.literals:
            if word and word in s:
                # whole words only: host "vm" must not turn "kvm" into "khost-1"
                pattern = r"(?<![A-Za-z0-9_-])" + re.escape(word) + r"(?![A-Za-z0-9_-])"
                s = re.sub(pattern, self._literal(kind, word, make), s)
        s = GPU_UUID.sub(lambda m: self._pseudo(
            "uuid", m.group(0), lambda n: "%s-00000000-0000-4000-8000-%012x" % (m.group(0)[:3], n)), s)
        s = IPOIB_HW.sub(self.ipoib_hw, s)
        s = IPV6.sub(self.ipv6, s)
        s = GID.sub(self.gid, s)
        s = IB_GUID.sub(self.guid, s)
        s = HEX_GUID.sub(self.hex_guid, s)
        s = NAMED_MAC.sub(self.named_mac, s)
        s = MAC.sub(self.mac, s)
        s = DASHED_MAC.sub(self.dashed_mac, s)
        s = MACHINE_ID.sub(self.machine_id, s)
        s = BARE_MAC.sub(self.bare_mac, s)
        s = DNS_NAME.sub(self.dns_name, s)
        s = IPV4.sub(self.ipv4, s)
        return s


def _walk(obj: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, list):
        return [_walk(v, fn) for v in obj]
    if isinstance(obj, dict):
        return {fn(k) if isinstance(k, str) else k: _walk(v, fn) for k, v in obj.items()}
    return obj


def _shaped(pattern: re.Pattern[str], s: str) -> re.Match[str]:
    """``pattern`` matched at the start of ``s``, which the caller has just built in its shape."""
    m = pattern.match(s)
    if m is None:
        raise ValueError(f"{s!r} is not in the shape of {pattern.pattern!r}")
    return m


def _serial_pseudonym(width: int) -> Callable[[int], str]:
    """Pseudonyms ``S0001``... as wide as the serial number they stand for (at least five characters)."""
    return lambda n: "S%0*d" % (max(width - 1, 4), n)


def _learn_literals(snap: SnapshotData) -> list[tuple[str, str, Callable[[int], str]]]:
    """Host names and serial numbers are free text: learn them from where they are defined."""
    literals: list[tuple[str, str, Callable[[int], str]]] = []
    names = set()
    host = snap.meta.get("hostname")
    if host:
        names.add(host)
        names.add(host.split(".")[0])
    for p in ("/proc/sys/kernel/hostname", "/etc/hostname"):
        v = snap.files.get(0, {}).get(p)
        if isinstance(v, bytes) and v.strip():
            names.add(v.decode("utf-8", "replace").strip())
    domains = {n.split(".", 1)[1] for n in names if "." in n.strip(".")}
    v = snap.files.get(0, {}).get("/proc/sys/kernel/domainname")
    if isinstance(v, bytes) and v.strip() and v.strip() != b"(none)":
        domains.add(v.decode("utf-8", "replace").strip())
    for domain in sorted(domains, key=len, reverse=True):
        literals.append((domain, "domain", lambda n: f"domain-{n}.example.invalid"))
    for name in sorted(names, key=len, reverse=True):
        if len(name) >= 2 and name not in ("localhost",):
            literals.append((name, "host", lambda n: f"host-{n}"))
    for rec in snap.nvml:
        if rec.get("call", [None])[0] in ("nvmlDeviceGetSerial", "nvmlDeviceGetBoardPartNumber") and rec.get("ok"):
            serial = str(rec["ok"])
            literals.append((serial, "serial", _serial_pseudonym(len(serial))))
    return literals


def _kmsg_used(record: dict) -> dict:
    """Only the kernel-log lines the kmsg probe reads anything from leave the site."""
    from ccdiag.probes.kmsg import lines_used

    if not isinstance(record, dict) or not isinstance(record.get("lines"), list):
        return record
    lines = [l for l in record["lines"] if isinstance(l, str)]
    return {**record, "lines": lines_used(lines), "redacted_lines": len(lines) - len(lines_used(lines))}


@dataclass
class Dropped:
    """What a redaction left out: (kind, where, why) per item, for the sender to review."""

    items: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, kind: str, where: str, why: str) -> None:
        self.items.append((kind, where, why))

    def lines(self) -> list[str]:
        """One line per item, names only (a dropped value is never printed: it may be the secret)."""
        return [f"{kind} {where}: {why}" for kind, where, why in self.items]


def redact(snap: SnapshotData) -> tuple[SnapshotData, dict[str, int]]:
    """A redacted copy of ``snap`` and how many distinct values of each kind were replaced."""
    out, counts, _ = redact_with_report(snap)
    return out, counts


def redact_with_texts(snap: SnapshotData, texts: dict[str, str]) -> tuple[SnapshotData, dict[str, str], dict[str, int],
                                                                          Redactor]:
    """:func:`redact` of ``snap`` and, with the very same pseudonyms, of ``texts`` recorded beside it
    (a JSON report, ``nvidia-smi -q`` of the same node): a serial or GPU UUID reads as one pseudonym
    in the snapshot and in every text, so the two still compare field by field. The redactor comes
    back too, for texts the same node writes later (``redactor.text(...)``: the same pseudonyms)."""
    nets = _learn_networks(snap)
    probe = Redactor(_learn_literals(snap), networks=nets)
    _redact_into(snap, probe, Dropped())
    for text in texts.values():
        probe.text(text)
    originals = {orig for table in probe.maps.values() for orig in table}
    r = Redactor(_learn_literals(snap), reserved=originals, networks=nets)
    out = _redact_into(snap, r, Dropped())
    redacted = {name: r.text(text) for name, text in texts.items()}
    return out, redacted, {kind: len(table) for kind, table in r.maps.items()}, r


def redact_with_report(snap: SnapshotData) -> tuple[SnapshotData, dict[str, int], Dropped]:
    """A redacted copy of ``snap``, the pseudonyms handed out per kind, and what was dropped."""
    # first pass: learn every original, so no pseudonym handed out equals a real value of this snapshot
    nets = _learn_networks(snap)
    probe = Redactor(_learn_literals(snap), networks=nets)
    _redact_into(snap, probe, Dropped())
    originals = {orig for table in probe.maps.values() for orig in table}
    r = Redactor(_learn_literals(snap), reserved=originals, networks=nets)
    dropped = Dropped()
    out = _redact_into(snap, r, dropped)
    counts = {kind: len(table) for kind, table in r.maps.items()}
    return out, counts, dropped


_PATH_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?(?:/[^\s]*)?$")


def _value(r: Redactor, name: str, value: str, rule: str) -> tuple[str | None, str]:
    """(the value kept under ``rule``, or None; why it was dropped or replaced).

    A value a check reads is never dropped silently, since a check may judge it (an interface that
    does not exist, a topology file that is missing): a secret-looking one becomes a placeholder that
    means nothing (``redacted-N``), a private path one under ``/redacted/``, and the reason says so."""
    if looks_secret(value) and rule != allowlist.PROVIDER_CONSTANT:
        return r._pseudo("secret", value, lambda n: f"redacted-{n}"), "looks like a secret: replaced"
    if rule == allowlist.KEEP:
        return value, ""
    if rule == allowlist.PSEUDONYMISE:
        return r.text(value), ""
    if rule == allowlist.HOSTPORT:
        host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit():
            host, port = value, ""
        fake = r.text(host)
        if fake == host and host and not host.startswith(("127.", "localhost")):
            fake = r._pseudo("host", host, lambda n: f"host-{n}")
        return fake + (":" + port if port else ""), ""
    if rule == allowlist.SYSTEM_PATH:
        if value.startswith(allowlist.SYSTEM_DIRS) and ".." not in value:
            return r.text(value), ""
        # ``${NCCL_LIB_DIR}/tuner.textproto`` (a provider's profile): a path under a variable that
        # is itself a system path where it is set names no person; that variable is judged on its own
        ref = _PATH_REF.match(value)
        if ref and ".." not in value and allowlist.env_rule(ref.group(1)) == allowlist.SYSTEM_PATH:
            return r.text(value), ""
        return (r._pseudo("path", value, lambda n: f"/redacted/path-{n}"),
                "a path outside the system directories: replaced")
    if rule == allowlist.PROVIDER_CONSTANT:
        if value.strip() in allowlist.PROVIDER_CONSTANTS:
            return value, ""
        return None, "not a provider identity string"
    return None, "no rule"


def _environ(r: Redactor, env: dict, dropped: Dropped) -> dict:
    out = {}
    for name, value in env.items():
        rule = allowlist.env_rule(name)
        if rule is None or not isinstance(value, str):
            dropped.add("environment", name, "not read by any check")
            continue
        kept, why = _value(r, name, value, rule)
        if why:
            dropped.add("environment", name, why)
        if kept is not None:
            out[name] = kept
    return out


_CONF_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def _config(r: Redactor, path: str, text: str, dropped: Dropped) -> str | None:
    """The lines of a configuration file the allow-list names (``None``: the file is not read by any check)."""
    if path == allowlist.NCCL_CONF:
        keys: dict[str, str] | None = {}
        rule_of = allowlist.env_rule
    else:
        entry = next((k for k in allowlist.CONFIG_FILES if path == k or (k.endswith("/") and path.startswith(k))), None)
        if entry is None:
            return None
        keys = allowlist.CONFIG_FILES[entry]
        rule_of = (lambda name: keys.get(name)) if keys is not None else (lambda name: None)
    kept = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            if line.strip():
                dropped.add("config line", f"{path}:{n}", "a comment")
            continue
        if keys is None:  # a list of names (modules)
            word = line.strip()
            if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", word):
                kept.append(word)
            else:
                dropped.add("config line", f"{path}:{n}", "not a module name")
            continue
        m = _CONF_LINE.match(line)
        rule = rule_of(m.group(1)) if m else None
        if m is None or rule is None:
            dropped.add("config line", f"{path}:{n}" + (f" ({m.group(1)})" if m else ""), "not read by any check")
            continue
        value = m.group(2)
        quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'"
        inner = value[1:-1] if quoted else value
        out, why = _value(r, m.group(1), inner, rule)
        if why:
            dropped.add("config line", f"{path}:{n} ({m.group(1)})", why)
        if out is None:
            continue
        kept.append(f"{m.group(1)}={value[0] + out + value[-1] if quoted else out}")
    return "\n".join(kept) + ("\n" if kept else "")


def _dmi(r: Redactor, path: str, text: str, dropped: Dropped) -> str | None:
    name = path[len(allowlist.DMI_DIR):]
    rule = allowlist.DMI.get(name)
    if rule is None:
        dropped.add("DMI field", name, "not read by any check")
        return None
    kept, why = _value(r, name, text.strip(), rule)
    if why:
        dropped.add("DMI field", name, why)
    if kept is None:
        return None
    return kept + "\n"


#: a process name in a kernel-log line (``name=python3,`` in an XID)
_PROC_NAME = re.compile(r"(\bname=)([^,\s][^,]*?)(?=,|$)")


def _kmsg_line(r: Redactor, line: str) -> str:
    line = _PROC_NAME.sub(lambda m: m.group(1) + (m.group(2) if m.group(2) in ("<unknown>", "'<unknown>'") else
                                                  r._pseudo("process", m.group(2), lambda n: f"process-{n}")), line)
    return scrub(line)


def _nvml_record(rec: dict, dropped: Dropped) -> dict | None:
    call = rec.get("call", [None])[0] if isinstance(rec.get("call"), list) else None
    if call in allowlist.NVML_DROPPED:
        dropped.add("NVML answer", str(call), "names a process")
        return None
    fields = allowlist.NVML_FIELDS.get(call) if call else None
    if fields is not None and isinstance(rec.get("ok"), list):
        kept = []
        for item in rec["ok"]:
            if isinstance(item, dict):
                gone = sorted(k for k in item if k not in fields)
                if gone:
                    dropped.add("NVML field", f"{call}: {', '.join(map(str, gone))}", "not read by any check")
                item = {k: v for k, v in item.items() if k in fields}
            kept.append(item)
        rec = {**rec, "ok": kept}
    return rec


def _file(r: Redactor, path: str, text: str, dropped: Dropped) -> str | None:
    """A text file as it may leave: DMI and configuration files by the allow-list, any other file
    under /etc dropped, kernel files (/sys, /proc) pseudonymised."""
    if path.startswith(allowlist.DMI_DIR):
        return _dmi(r, path, text, dropped)
    if path == allowlist.NCCL_CONF or path.startswith("/etc/"):
        if path in ("/etc/hostname",):
            return r.text(text)
        kept = _config(r, path, text, dropped)
        if kept is None:
            dropped.add("file", path, "not read by any check")
        return kept
    if path == "/proc/cmdline":
        text = kernel_cmdline_kept(text) + "\n"
    if path.endswith("/cgroup"):  # container and pod ids: the runtime is in the path's words
        text = re.sub(r"[0-9a-fA-F]{12,}|[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}",
                      lambda m: r._pseudo("container", m.group(0), lambda n: "%012x" % n), text)
    return scrub(r.text(text))


def _redact_into(snap: SnapshotData, r: Redactor, dropped: Dropped) -> SnapshotData:
    out = SnapshotData()
    out.meta = _walk(dict(snap.meta), r.text)
    out.meta["redacted"] = True
    identity = _platform_identity(snap)
    if identity:
        out.meta["platform_identity"] = identity
    for epoch, files in snap.files.items():
        for path, value in files.items():
            if isinstance(value, bytes):
                try:
                    text = value.decode("utf-8")
                except UnicodeDecodeError:
                    if path.startswith(("/etc/", allowlist.DMI_DIR)):
                        dropped.add("file", path, "binary content in a configuration or identity file")
                        continue
                    out.files.setdefault(epoch, {})[path] = value  # binary (PCI config space): no identifiers
                    continue
                kept = _file(r, path, text, dropped)
                if kept is not None:
                    out.files.setdefault(epoch, {})[path] = kept.encode("utf-8")
            else:
                out.files.setdefault(epoch, {})[path] = value
    out.links = dict(snap.links)
    out.dirs = set(snap.dirs)
    out.listings = {k: list(v) for k, v in snap.listings.items()}
    commands = []
    for rec in json.loads(json.dumps(snap.commands)):
        argv = rec.get("argv") if isinstance(rec, dict) else None
        if isinstance(argv, list) and argv and os.path.basename(str(argv[0])) in allowlist.COMMANDS_DROPPED:
            dropped.add("command output", str(argv[0]), "a process list")
            rec = {**rec, "stdout": "", "stderr": ""}
        commands.append(rec)
    out.commands = _walk(commands, lambda t: scrub(r.text(t)))
    out.nvml = []
    for rec in snap.nvml:
        rec = _nvml_record(dict(rec), dropped)
        if rec is None:
            continue
        if "ok" in rec:
            rec["ok"] = _walk(rec["ok"], r.text)
        out.nvml.append(rec)
    kmsg = {k: _kmsg_used(v) for k, v in snap.kmsg.items()}
    for epoch, record in kmsg.items():
        if isinstance(record, dict) and record.get("redacted_lines"):
            dropped.add("kernel-log lines", f"{record['redacted_lines']} of epoch {epoch}", "not read by any check")
    out.kmsg = _walk(kmsg, lambda t: _kmsg_line(r, r.text(t)))
    out.net = _walk({k: v for k, v in snap.net.items()}, r.text)
    out.statvfs = dict(snap.statvfs)
    out.environ = _environ(r, dict(snap.environ), dropped) if snap.environ is not None else None
    # Google's answer names the project number (projects/NUM/machineTypes/TYPE): only the type is kept
    out.imds = {}
    for k, v in snap.imds.items():
        if "text" in v and isinstance(v["text"], str):
            text = re.sub(r"projects/[^/]+/", "projects/REDACTED/", v["text"])
            if looks_secret(text):
                dropped.add("metadata answer", str(k), "looks like a secret")
                continue
            out.imds[k] = {"text": text}
        else:
            out.imds[k] = dict(v)
    return out


def _platform_identity(snap: SnapshotData) -> dict:
    """The provider and instance type the original snapshot shows (kept in the metadata for the
    reader; the replay derives them again from the DMI fields and metadata answers kept)."""
    try:
        from ccdiag.host.door import ReplayHost
        from ccdiag.probes.platform import classify, DMI_FIELDS

        files = snap.files.get(0, {})
        dmi = {f: (files.get(f"{allowlist.DMI_DIR}{f}") or b"").decode("utf-8", "replace").strip() for f in DMI_FIELDS
               if isinstance(files.get(f"{allowlist.DMI_DIR}{f}"), bytes)}
        provider, instance = classify(dmi)
        del ReplayHost
    except Exception:  # noqa: BLE001 - metadata for a human reader; the replay does not depend on it
        return {}
    return {k: v for k, v in (("provider", provider), ("instance_type", instance)) if v}
