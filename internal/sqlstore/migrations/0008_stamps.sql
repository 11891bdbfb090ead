-- rheo schema, version 8: which partitions were appended to since a
-- group's fetch left none behind.
--
-- A fetch from every partition of a stream first finds the partitions
-- with events past the group's cursor. With many partitions, that was a
-- read of every cursor and every high watermark, most of them unchanged.
-- Now an append stamps each partition it writes with the stream's change
-- count after it (rheo_partitions.stamp), and a fetch that leaves no new
-- event behind records the count it saw (rheo_groups.seen): the next
-- fetch reads only the partitions stamped after it. 0 is "not known"
-- (streams and groups from before this version, a group whose cursors a
-- replay or reset moved back): the fetch reads every cursor, as before.
-- SQLite's fetch and append keep them; PostgreSQL's, which are its own
-- statements, leave them at 0.
ALTER TABLE rheo_partitions ADD COLUMN stamp BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rheo_groups ADD COLUMN seen BIGINT NOT NULL DEFAULT 0
