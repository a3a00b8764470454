-- The schema of state.db as the first release (turn 1) wrote it: dumped from sqlite_master of
-- a fresh database made by that code. tests/unit/test_migrations.py upgrades it.
-- PRAGMA user_version was 0; meta.schema_version was the version stamp.
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE volumes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    volume_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    capacity_bytes INTEGER NOT NULL,
    capabilities TEXT NOT NULL,
    fs_type TEXT NOT NULL,
    parameters TEXT NOT NULL,
    source_kind TEXT,
    source_id TEXT,
    node_id TEXT,
    created_at REAL NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE snapshots (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    snapshot_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    source_volume_id TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_at REAL NOT NULL,
    ready INTEGER NOT NULL
);
CREATE TABLE publications (
    volume_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    access_mode INTEGER NOT NULL,
    access_type TEXT NOT NULL,
    readonly INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    published_at REAL NOT NULL,
    PRIMARY KEY (volume_id, node_id)
);
CREATE INDEX publications_by_node ON publications (node_id);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    volume_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    reason TEXT NOT NULL
);
CREATE TABLE node_staged (
    volume_id TEXT PRIMARY KEY,
    staging_path TEXT NOT NULL,
    access_type TEXT NOT NULL,
    access_mode INTEGER NOT NULL,
    fs_type TEXT NOT NULL,
    device TEXT NOT NULL,
    generation INTEGER NOT NULL,
    staged_at REAL NOT NULL,
    readonly INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE node_published (
    target_path TEXT PRIMARY KEY,
    volume_id TEXT NOT NULL,
    readonly INTEGER NOT NULL,
    access_mode INTEGER NOT NULL,
    access_type TEXT NOT NULL,
    mount_flags TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('schema_version', '1');
