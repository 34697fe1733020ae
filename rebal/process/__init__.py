"""The process layer: every external command rebal runs starts here, and nowhere else.

- command.py   one command (or one over ssh, given as its ssh argv): argument tuples, no shell, a
               timeout, logged, stoppable, known failures turned into typed errors; `spawn` for a
               process that lives beside rebal (an ssh master)
- pipeline.py  a pipeline of commands: `zfs send | zstd | ssh ... zfs receive` with the stream
               counted and throttled between its two ends, and the gate's pipeline on the backup host
"""
