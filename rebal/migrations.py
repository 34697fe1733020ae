"""The state database's schema, as the migrations that build it (state.py applies them by
PRAGMA user_version)."""

from __future__ import annotations

# Each entry moves the schema from version i to i+1. Never edit a released entry; append.
MIGRATIONS: list[str] = [
    # 1: runs and fill samples
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,              -- status, rebalance, replicate, health, ...
        job TEXT,                        -- replication job name or rebalance target
        pool TEXT,
        started REAL NOT NULL,
        ended REAL,
        outcome TEXT,                    -- NULL while running; ok, warning, failed, interrupted
        error TEXT,
        details TEXT                     -- JSON: figures of the run
    );
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY,
        ts REAL NOT NULL,
        pool TEXT NOT NULL,
        size INTEGER NOT NULL,
        alloc INTEGER NOT NULL,
        free INTEGER NOT NULL,
        spread REAL NOT NULL
    );
    CREATE TABLE sample_vdevs (
        sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,
        vdev TEXT NOT NULL,
        size INTEGER NOT NULL,
        alloc INTEGER NOT NULL,
        free INTEGER NOT NULL,
        PRIMARY KEY (sample_id, vdev)
    );
    """,
    # 2: the vdev's type and class in samples, lookups by pool and time, a key/value table
    """
    ALTER TABLE sample_vdevs ADD COLUMN type TEXT NOT NULL DEFAULT '';
    CREATE INDEX samples_pool_ts ON samples(pool, ts);
    CREATE INDEX runs_kind_started ON runs(kind, started);
    CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # 3: the rebalance journal. Paths are BLOBs: file names are bytes, not always UTF-8.
    """
    ALTER TABLE runs ADD COLUMN key TEXT;  -- what a run works on, to find the run to resume
    CREATE TABLE rebalance_dirs (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        path BLOB NOT NULL,
        state TEXT NOT NULL,             -- started, done, interrupted
        ino INTEGER,                     -- the directory's inode and times when it was started,
        atime_ns INTEGER,                -- restored by recovery if the run dies inside it
        mtime_ns INTEGER,
        files INTEGER NOT NULL DEFAULT 0,
        bytes INTEGER NOT NULL DEFAULT 0,
        ended REAL,
        PRIMARY KEY (run_id, path)
    );
    CREATE TABLE journal (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        dir BLOB NOT NULL,
        name BLOB NOT NULL,
        tmp BLOB NOT NULL,               -- temp name in the same directory
        orig_ino INTEGER NOT NULL,
        copy_ino INTEGER,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        ctime_ns INTEGER NOT NULL,
        state TEXT NOT NULL,             -- copying, linking (a group's copy is done), swapped, or an outcome
        reason TEXT
    );
    CREATE TABLE journal_links (         -- the names of a hardlink group rewritten as one
        journal_id INTEGER NOT NULL REFERENCES journal(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        dir BLOB NOT NULL,
        name BLOB NOT NULL,
        PRIMARY KEY (journal_id, idx)
    );
    CREATE INDEX journal_open ON journal(state) WHERE state IN ('copying', 'linking');
    CREATE INDEX runs_key ON runs(key, started);
    """,
    # 4: bytes moved so far by a run that is still going (rebal runs shows it live)
    """
    ALTER TABLE runs ADD COLUMN progress INTEGER;
    """,
    # 5: what was last said of each subject (notifications on change, reminders); made on first
    # use before this migration, hence IF NOT EXISTS
    """
    CREATE TABLE IF NOT EXISTS notify_state (subject TEXT PRIMARY KEY, level TEXT NOT NULL,
        digest TEXT NOT NULL, since REAL NOT NULL, last_sent REAL);
    """,
    # 6: the newest snapshot each dataset of a job has on its target (snapshot age monitoring)
    """
    CREATE TABLE replica_points (job TEXT NOT NULL, dataset TEXT NOT NULL, snapshot TEXT NOT NULL,
        taken REAL NOT NULL, recorded REAL NOT NULL, PRIMARY KEY (job, dataset));
    """,
    # 7: a pool's rebuild from its backup (rebal rebuild): what was recorded before the pool was
    # destroyed (layout, properties, the restore point), and each step as it ended
    """
    CREATE TABLE rebuilds (pool TEXT PRIMARY KEY, job TEXT NOT NULL, step TEXT NOT NULL,
        record TEXT NOT NULL, started REAL NOT NULL, updated REAL NOT NULL);
    CREATE TABLE rebuild_steps (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, step TEXT NOT NULL,
        at REAL NOT NULL, note TEXT NOT NULL DEFAULT '');
    """,
]
