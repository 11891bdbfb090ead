-- rheo schema, version 5: a span carries a digest of its members' event IDs.
--
-- A settle fences every member on its event ID. SQLite's fetch now stores,
-- with each span it writes, the digest of its members' event IDs in
-- sequence order (see spanDigest), so that an ack of a whole span checks
-- them against the digest of the IDs it names instead of reading each
-- member's event. Spans written before this version (digest NULL), and
-- PostgreSQL's (which fence each member on its hash in ids), are checked
-- as before.
ALTER TABLE rheo_spans ADD COLUMN digest BIGINT
