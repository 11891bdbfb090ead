-- rheo schema, version 1. Tokens in braces are replaced by the dialect:
-- {IDPK} an auto-assigned integer primary key, {TEXT} a string, {JSON} a
-- JSON document that must come back byte-identical, {TABLEOPTS} options
-- appended to the events and deliveries tables.

-- Streams are interned to small integer ids so that every row and index of
-- events and deliveries carries an integer instead of the stream name.
-- changes grows with every commit that may make work claimable on the
-- stream (appends, nacks, replays, redrives, resets): a cheap signal for
-- processes that share the store.
CREATE TABLE IF NOT EXISTS rheo_streams (
	id {IDPK},
	name {TEXT} NOT NULL UNIQUE,
	partitions INTEGER NOT NULL,
	created_at BIGINT NOT NULL,
	changes BIGINT NOT NULL DEFAULT 0
);

-- One row per (stream, partition): the sequence allocator, which doubles as
-- the partition's high watermark.
CREATE TABLE IF NOT EXISTS rheo_partitions (
	stream_id BIGINT NOT NULL,
	part INTEGER NOT NULL,
	hwm BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (stream_id, part)
);

-- The log. Times are integer microseconds since the Unix epoch, UTC.
CREATE TABLE IF NOT EXISTS rheo_events (
	stream_id BIGINT NOT NULL,
	part INTEGER NOT NULL,
	seq BIGINT NOT NULL,
	id {TEXT} NOT NULL,
	etype {TEXT} NOT NULL,
	ekey {TEXT} NOT NULL,
	ts BIGINT NOT NULL,
	payload {JSON} NOT NULL,
	metadata {JSON},
	PRIMARY KEY (stream_id, part, seq)
){TABLEOPTS};
CREATE UNIQUE INDEX IF NOT EXISTS rheo_events_id ON rheo_events (stream_id, id);
CREATE INDEX IF NOT EXISTS rheo_events_ts ON rheo_events (stream_id, ts);
CREATE INDEX IF NOT EXISTS rheo_events_type ON rheo_events (stream_id, etype);
CREATE INDEX IF NOT EXISTS rheo_events_key ON rheo_events (stream_id, ekey);

CREATE TABLE IF NOT EXISTS rheo_groups (
	id {IDPK},
	stream_id BIGINT NOT NULL,
	name {TEXT} NOT NULL,
	max_attempts INTEGER NOT NULL,
	created_at BIGINT NOT NULL,
	UNIQUE (stream_id, name)
);

-- Per (group, partition): the materialization cursor. Every sequence at or
-- below it was offered; one without a delivery row was acked (and compacted
-- at once) or lies before the group's start. The committed frontier is
-- derived: the sequence before the lowest pending delivery, or the cursor.
CREATE TABLE IF NOT EXISTS rheo_group_parts (
	grp_id BIGINT NOT NULL,
	part INTEGER NOT NULL,
	offered BIGINT NOT NULL,
	PRIMARY KEY (grp_id, part)
);

-- Deliveries hold only the in-flight window and dead letters (SPEC R9):
-- status 0 available, 1 leased, 2 dead. due_at is when a pending row becomes
-- claimable (available_at when available, expires_at when leased) and NULL
-- for dead letters.
CREATE TABLE IF NOT EXISTS rheo_deliveries (
	grp_id BIGINT NOT NULL,
	part INTEGER NOT NULL,
	seq BIGINT NOT NULL,
	event_id {TEXT} NOT NULL,
	status SMALLINT NOT NULL,
	attempt INTEGER NOT NULL,
	lease_id {TEXT},
	consumer_id {TEXT},
	leased_at BIGINT,
	expires_at BIGINT,
	due_at BIGINT,
	reason {TEXT},
	dead_at BIGINT,
	PRIMARY KEY (grp_id, part, seq)
){TABLEOPTS};
CREATE INDEX IF NOT EXISTS rheo_deliveries_due ON rheo_deliveries (grp_id, part, due_at);
CREATE INDEX IF NOT EXISTS rheo_deliveries_pending ON rheo_deliveries (grp_id, part, seq) WHERE status < 2;
