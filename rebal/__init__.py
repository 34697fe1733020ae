"""rebal: keep a ZFS pool's data evenly spread over its vdevs."""

__version__ = "0.2.0"
