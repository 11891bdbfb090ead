-- rheo schema, version 3: a fetch reads claimable deliveries only.
--
-- Deliveries available at once (reopened, redriven, nacked without a delay)
-- are due below -2305843009213693952 (reopened ones at
-- -9223372036854775807, nacked ones at their time minus 2^62) and have an
-- index of their own in sequence order (a fetch reads a limit of them per partition, however many
-- there are); every other delivery with a due time (leased: its expiry;
-- nacked with a delay: its end) is in the index of due times, which a fetch
-- reads only up to its clock (however many leases are in flight or retries
-- delayed). Before this version, a fetch read through every due delivery
-- of the group (after a large replay), or every pending one before the
-- first claimable (behind many delayed retries).
UPDATE rheo_deliveries SET due_at = -9223372036854775807 WHERE due_at < -9223372036854775807;
CREATE INDEX IF NOT EXISTS rheo_deliveries_ready ON rheo_deliveries (grp_id, part, seq) WHERE status = 0 AND due_at < -2305843009213693952;
CREATE INDEX IF NOT EXISTS rheo_deliveries_timed ON rheo_deliveries (grp_id, part, due_at) WHERE due_at >= -2305843009213693952;
DROP INDEX IF EXISTS rheo_deliveries_due;
