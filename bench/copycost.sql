-- Whether COPY would append faster than rheo's multi-row INSERT, on
-- PostgreSQL's side: the same 100,000 rows, shaped as rheo_events' (all
-- five of its indexes, text in the "C" collation, IDs that ascend as
-- UUIDv7s do), built beforehand in a staging table so that neither side
-- pays for building them, then
--   - inserted in 100 statements of 1,000 rows (INSERT ... SELECT), and
--   - copied into a second table by one binary COPY from a file of the
--     client's (removed at the end).
-- Run:
--
--   psql -h 127.0.0.1 -U postgres test -q -f bench/copycost.sql
--
-- and read the timing after each label. It works in a schema of its own
-- (copyexp) and drops it.
\timing off
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS copyexp CASCADE;
CREATE SCHEMA copyexp;
SET search_path = copyexp;
CREATE TABLE ev (stream_id bigint NOT NULL, part int NOT NULL, seq bigint NOT NULL, id text COLLATE "C" NOT NULL,
	etype text COLLATE "C" NOT NULL, ekey text COLLATE "C" NOT NULL, ts bigint NOT NULL, payload text NOT NULL,
	metadata jsonb, PRIMARY KEY (stream_id, part, seq));
CREATE UNIQUE INDEX ev_id ON ev (stream_id, id);
CREATE INDEX ev_ts ON ev (stream_id, ts);
CREATE INDEX ev_type ON ev (stream_id, etype);
CREATE INDEX ev_key ON ev (stream_id, ekey);
CREATE TABLE ev_copy (LIKE ev INCLUDING ALL);
CREATE UNLOGGED TABLE src AS SELECT 1::bigint AS stream_id, i % 4 AS part, i::bigint AS seq,
	to_char(i, 'FM000000000000') || substr(md5(i::text), 1, 24) AS id, 'order.created'::text AS etype,
	'k' || (i % 5000) AS ekey, (extract(epoch from clock_timestamp())*1e6)::bigint AS ts,
	jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 977), 'total', i * 1.5, 'currency', 'EUR', 'lines', 3)::text AS payload,
	NULL::jsonb AS metadata
	FROM generate_series(0, 99999) i;
CREATE INDEX ON src (seq);
\copy src TO '/tmp/rheo_copycost.bin' WITH (FORMAT binary)
CHECKPOINT;
\timing on
\echo INSERT ... SELECT, 100 statements of 1,000 rows
DO $$ BEGIN FOR b IN 0..99 LOOP
  INSERT INTO ev SELECT * FROM src WHERE seq >= b*1000 AND seq < b*1000+1000;
END LOOP; END $$;
\timing off
CHECKPOINT;
\timing on
\echo one binary COPY of the 100,000 rows
\copy ev_copy FROM '/tmp/rheo_copycost.bin' WITH (FORMAT binary)
\timing off
\! rm -f /tmp/rheo_copycost.bin
DROP SCHEMA copyexp CASCADE;
