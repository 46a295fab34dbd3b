"""Builders of SYNTHESIZED host data (NVML answers, ...) for tests and the bundled samples.

Everything produced here is made up from documented facts about real hardware; nothing in it was
read from a machine. Snapshots built from it must say so in their metadata.
"""
