"""The way back: what the backup holds (backups.py), whether it is whole (verify.py), and getting
data back from it: a file or a dataset (restore.py), a whole tree (restore_tree.py), damaged blocks
(heal.py, corrective receives), a whole pool (rebuild.py with rebuild_steps.py and
rebuild_record.py). The same stream as the way in (replicate/stream.py's Transfer), with the hosts
swapped."""
