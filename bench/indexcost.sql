-- What rheo's indexes cost an append on PostgreSQL, server side only: 100
-- batches of 1,000 rows inserted into the bare baseline's table (a
-- bigserial key, jsonb payload), then into tables with rheo_events'
-- columns (the payload as text, as rheo keeps it) and, in turn,
-- its primary key only; plus the unique index of event IDs; plus the
-- indexes of times, types and keys (all of rheo_events' indexes). Run:
--
--   psql -h 127.0.0.1 -U postgres test -q -f bench/indexcost.sql
--
-- and read the timing after each label. It works in a schema of its
-- own (idxexp) and drops it. Event IDs are 36 characters that ascend
-- from row to row, as the UUIDv7s rheo generates do (an index of random
-- IDs costs more: each insert lands on another page).
\timing off
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS idxexp CASCADE;
CREATE SCHEMA idxexp;
SET search_path = idxexp;
CREATE TABLE bare (id bigserial PRIMARY KEY, eid text NOT NULL, payload jsonb NOT NULL);
CREATE TABLE ev (stream_id bigint NOT NULL, part int NOT NULL, seq bigint NOT NULL, id text NOT NULL, etype text NOT NULL, ekey text NOT NULL, ts bigint NOT NULL, payload text NOT NULL, metadata jsonb, PRIMARY KEY (stream_id, part, seq));
CREATE UNIQUE INDEX ev_id ON ev (stream_id, id);
CREATE INDEX ev_ts ON ev (stream_id, ts);
CREATE INDEX ev_type ON ev (stream_id, etype);
CREATE INDEX ev_key ON ev (stream_id, ekey);
CREATE TABLE ev1 (LIKE ev INCLUDING DEFAULTS); ALTER TABLE ev1 ADD PRIMARY KEY (stream_id, part, seq);
CREATE TABLE ev2 (LIKE ev INCLUDING DEFAULTS); ALTER TABLE ev2 ADD PRIMARY KEY (stream_id, part, seq); CREATE UNIQUE INDEX ev2_id ON ev2 (stream_id, id);
-- 100 batches of 1,000 rows each, payloads shaped like the peers bench's.
\timing on
\echo bare baseline table (bigserial key)
DO $$ BEGIN FOR b IN 0..99 LOOP
  INSERT INTO bare (eid, payload) SELECT to_char(i, 'FM000000000000') || substr(md5(i::text), 1, 24), jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 977), 'total', i * 1.5, 'currency', 'EUR', 'lines', 3) FROM generate_series(b*1000, b*1000+999) i;
END LOOP; END $$;
\echo rheo_events columns, primary key only
DO $$ BEGIN FOR b IN 0..99 LOOP
  INSERT INTO ev1 SELECT 1, i % 4, i, to_char(i, 'FM000000000000') || substr(md5(i::text), 1, 24), 'order.created', 'k' || (i % 5000), (extract(epoch from clock_timestamp())*1e6)::bigint, jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 977), 'total', i * 1.5, 'currency', 'EUR', 'lines', 3)::text, NULL FROM generate_series(b*1000, b*1000+999) i;
END LOOP; END $$;
\echo plus the unique index of event IDs
DO $$ BEGIN FOR b IN 0..99 LOOP
  INSERT INTO ev2 SELECT 1, i % 4, i, to_char(i, 'FM000000000000') || substr(md5(i::text), 1, 24), 'order.created', 'k' || (i % 5000), (extract(epoch from clock_timestamp())*1e6)::bigint, jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 977), 'total', i * 1.5, 'currency', 'EUR', 'lines', 3)::text, NULL FROM generate_series(b*1000, b*1000+999) i;
END LOOP; END $$;
\echo plus the indexes of times, types and keys (all of rheo_events)
DO $$ BEGIN FOR b IN 0..99 LOOP
  INSERT INTO ev SELECT 1, i % 4, i, to_char(i, 'FM000000000000') || substr(md5(i::text), 1, 24), 'order.created', 'k' || (i % 5000), (extract(epoch from clock_timestamp())*1e6)::bigint, jsonb_build_object('order_id', i, 'customer', 'c-' || (i % 977), 'total', i * 1.5, 'currency', 'EUR', 'lines', 3)::text, NULL FROM generate_series(b*1000, b*1000+999) i;
END LOOP; END $$;
\timing off
DROP SCHEMA idxexp CASCADE;
