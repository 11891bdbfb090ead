-- rheo schema, version 2: retention and deletion.

-- A stream's retention policy (max_age in nanoseconds, 0 = none) and its
-- retention lease: the one client that enforces the policy until
-- retention_until (microseconds). Deleted streams stay as tombstones (a name
-- no caller can give, partitions 0) so that their id is never reused by a
-- process that still holds it in a cache.
ALTER TABLE rheo_streams ADD COLUMN max_age BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rheo_streams ADD COLUMN max_events BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rheo_streams ADD COLUMN interest SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE rheo_streams ADD COLUMN retention_owner {TEXT};
ALTER TABLE rheo_streams ADD COLUMN retention_until BIGINT NOT NULL DEFAULT 0;

-- skipped counts events trims removed before the group acked them. A
-- deleted group stays as a tombstone with stream_id = -id.
ALTER TABLE rheo_groups ADD COLUMN skipped BIGINT NOT NULL DEFAULT 0;

-- Per (stream, partition): the highest sequence Trim removed. A table of
-- its own, so that trims never lock the partition row appends update.
CREATE TABLE IF NOT EXISTS rheo_trimmed (
	stream_id BIGINT NOT NULL,
	part INTEGER NOT NULL,
	through BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (stream_id, part)
);
