-- rheo schema, version 4: spans, one row per run of fresh events a fetch
-- leased together.
--
-- A fetch that leases events past a partition's cursor may write one span
-- for them instead of one delivery row each: the run lo..hi (contiguous
-- sequences), their common lease (token, attempt, consumer, times) and
-- done, one character per member ('0' still leased under the span, '1'
-- settled or moved to a delivery row of its own). A member's lease ID is
-- the token, a dot and its sequence. pending counts the '0' members and
-- low is the lowest of them, so that the frontier and the counts of
-- leases read spans as cheaply as delivery rows. A member leaves the span
-- when it is acked (gone, like an acked delivery row), nacked, rejected or
-- renewed (it gets its own delivery row, with the same lease ID); when a
-- span's lease expires, or anything but a fetch or a settle touches its
-- partition (replay, trim), its members become the delivery rows they
-- stand for, leased as they were. A span whose members are all done is
-- deleted by the next fetch of its partition.
CREATE TABLE IF NOT EXISTS rheo_spans (
	grp_id BIGINT NOT NULL,
	part INTEGER NOT NULL,
	lo BIGINT NOT NULL,
	hi BIGINT NOT NULL,
	token {TEXT} NOT NULL,
	attempt INTEGER NOT NULL,
	consumer_id {TEXT},
	leased_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	done {TEXT} NOT NULL,
	pending INTEGER NOT NULL,
	low BIGINT NOT NULL,
	PRIMARY KEY (grp_id, part, lo)
){TABLEOPTS}
