"""Everything that talks to ZFS: models, pure parsers, and the command backend."""
