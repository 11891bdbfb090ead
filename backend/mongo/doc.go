// Package mongo is rheo's MongoDB backend (go.mongodb.org/mongo-driver/v2).
//
// Import it for its DSN registration, or build it on a client you own:
//
//	import _ "github.com/rheo-go/rheo/backend/mongo"
//	client, err := rheo.Open(ctx, "mongodb://localhost:27017/rheo")
//
//	b, err := mongo.New(myClient, "rheo") // borrows myClient; call b.Migrate
//	client := rheo.New(b)
//
// Open (schemes mongodb and mongodb+srv; the DSN path names the database)
// owns its connection and migrates unless WithoutMigrate; New borrows the
// caller's *mongo.Client and never disconnects it.
//
// # The rule every write follows
//
// The backend takes no lock and uses no transaction, and it does not rely on
// the atomicity of conditional updates (findOneAndUpdate, $inc): every
// exclusive decision is won by inserting a document whose _id another
// writer may want too. The unique _id index lets exactly one insert create
// it; a duplicate-key error means another writer won, and the loser reads
// the new state and tries again. Updates are used only for hints and
// housekeeping where a lost or stale update cannot break a rule. So the same
// code is correct on MongoDB (whose unique indexes are atomic) and on
// servers whose updates are not atomic under concurrency, such as FerretDB,
// where its races are tested.
//
// # Data model
//
// Every document is read by its string _id alone (a point lookup on the _id
// index); keys are built from length-prefixed parts. Collections (names
// prefixed "rheo_" unless WithPrefix):
//
//   - streams: one document per stream (_id = name): partition count,
//     creation time and a token fresh for each creation, part of every key
//     of the stream's data, so a stream created again never meets its
//     predecessor's documents.
//   - groups: one document per group: max attempts, start per partition, and
//     its own fresh token.
//   - batches: the stream's batch chain. Version n (_id "<stream key>#n") is
//     the n-th committed Append: its events (with sequences) and the high
//     watermark of every partition after it.
//   - pointers: derived lookups, event (partition, sequence) -> batch and
//     event ID -> batch, written after a batch commits.
//   - states: per group and partition, a chain of versions (_id
//     "<group partition key>#v"): the cursor (every sequence at or below it
//     was offered) and the deliveries that are pending, dead or acked above
//     the frontier.
//   - heads: hints of where each chain's head is (updated with $max, best
//     effort), so that a process that starts reads few versions.
//   - meta: the schema version.
//
// # Chains: how a decision is an insert
//
// A chain is a sequence of immutable documents base#1, base#2, … Its head
// is found by point lookups: start at a version known to exist (cached in
// the process, or the shared hint) and probe the next _id until one is
// missing. To change what a chain says, a writer reads head v, computes the
// new state, and inserts version v+1. Only one insert of v+1 can succeed, so
// the writer that succeeds is the only one whose change applies to v, and
// every change applies to the state before it: changes of one chain are
// serial, as if under a lock, though none is held. Versions are never
// deleted (old group-state versions are emptied of their deliveries a few
// versions behind the head, keeping their _id), so a writer paused for any
// time can never recreate a version that once existed: there is no ABA.
//
// The decisions:
//
//   - Taking sequence numbers (Append): insert version n+1 of the stream's
//     batch chain. The one document holds every event of the call, so the
//     batch is all or nothing, across partitions too. It can be written only
//     by a writer that read version n, and version n only after n-1, so
//     batches commit one after another in chain order and each partition's
//     sequences are assigned in commit order: a reader that sees batch n sees
//     every batch before it, and sequence order equals commit order. IDs are
//     checked against the pointers of every batch through n (the writer
//     completes them first); a batch committing after n needs n+1 free, so
//     no other batch can slip in between the check and the insert.
//   - Claiming deliveries (Fetch), settling, renewing, replaying, redriving,
//     resetting: insert version v+1 of the group's state chain in that
//     partition. A claim, a settle and a renew of the same delivery all
//     compete for the same next version, so a lease is fenced exactly: a
//     settle applies only if, in the version it replaces, the delivery is
//     still leased under that lease ID.
//   - Creating a stream or group: insert its document.
//
// # Frontier
//
// The frontier of a partition is computed from one state version: the
// sequence before its lowest pending delivery, or its cursor. The cursor
// only moves over sequences the batch chain holds (it is advanced to at
// most the high watermark read from a committed batch), and batches commit
// in sequence order, so no sequence at or below the frontier can still
// appear later: the frontier is honest. Acked deliveries at or below it are
// dropped from the next version (R9).
//
// # Costs
//
// Fetch, settle, renew and lag read chain heads and pointers by _id and
// write one document per partition touched: their cost does not grow with
// the stream's length. Each version of a group's state copies its pending
// deliveries and dead letters, so it grows with the in-flight window and the
// dead letters (documents are limited to 16 MiB). Concurrent writers of one
// chain retry when they lose, so heavy contention on one partition costs
// retries. A batch document holds a whole Append (16 MiB at most) and the
// high watermark of every partition. Query scans the selected partitions'
// sequence range. Wakeups poll each watched stream's batch head, backing off
// from 10ms to a second (WithPollInterval); there are no change streams.
//
// Storage: events live in batch documents; pointers add two small
// documents per event; every group-state change leaves a small emptied
// version behind. Nothing of a deleted stream is read again, but no process
// reclaims the emptied versions yet.
package mongo
