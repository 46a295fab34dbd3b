"""``dmidecode`` output: the few identity strings the platform probe reads from sysfs's DMI files.

The kernel's ``/sys/class/dmi/id/*`` files hold the same SMBIOS strings dmidecode decodes:
``sys_vendor`` and ``product_name``/``product_version`` are the System Information (type 1)
Manufacturer, Product Name and Version, ``board_vendor`` the Base Board (type 2) Manufacturer,
``chassis_asset_tag`` the Chassis (type 3) Asset Tag, ``bios_vendor`` the BIOS (type 0) Vendor.
"""

from __future__ import annotations

#: (dmidecode block title, field) -> the sysfs DMI file holding the same string
DMI_FILES = {("System Information", "Manufacturer"): "sys_vendor",
             ("System Information", "Product Name"): "product_name",
             ("System Information", "Version"): "product_version",
             ("Base Board Information", "Manufacturer"): "board_vendor",
             ("Chassis Information", "Asset Tag"): "chassis_asset_tag",
             ("BIOS Information", "Vendor"): "bios_vendor"}


def dmi_files(lines: list[str]) -> dict[str, str]:
    """sysfs DMI file name -> value, for the blocks dmidecode printed (the first block of each kind)."""
    out: dict[str, str] = {}
    block = None
    for line in lines:
        if not line.strip():
            continue
        if not line[0].isspace():
            block = line.strip()
            continue
        if block is None or ":" not in line:
            continue
        key, _, value = line.strip().partition(":")
        name = DMI_FILES.get((block, key.strip()))
        if name and name not in out:
            out[name] = value.strip()
    return out
