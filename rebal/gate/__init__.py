"""The gate: `rebal gate`, the ssh forced command of a backup host's gated keys, and all that a
hostile key meets there. check.py reads a command line and allows or refuses it; serve.py runs what
was allowed (zfs receive, send, rsync, verify) and logs each refusal; rsync.py and confine.py keep
an rsync inside its directory against paths swapped under it; verify.py answers a verify's reads.
It imports the layers below it only (names, errors, process, zfs, transport): the replicator is not
part of what an attacker can reach."""
