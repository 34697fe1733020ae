"""The rebalance engine: scan and plan, copy-verify-swap, journal, zfs rewrite."""
