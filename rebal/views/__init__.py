"""Pure rendering: result objects in, text or JSON-ready dicts out. Nothing here prints, reads the
pool or imports rich: the CLI writes what these return, and tests call them without ZFS."""
