package mongo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/rheo-go/rheo"
	rdsn "github.com/rheo-go/rheo/internal/dsn"
	"github.com/rheo-go/rheo/internal/notify"
)

func init() {
	rheo.Register("mongodb", openDSN)
	rheo.Register("mongodb+srv", openDSN)
}

// SchemaVersion is the data model version Migrate records.
const SchemaVersion = 1

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix    string
	noMigrate bool
	poll      time.Duration
}

// WithPrefix sets the prefix of every collection name (default "rheo_"), so
// that several rheo stores can share one database.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithoutMigrate makes Open skip Migrate (run `rheo migrate` or call Migrate
// yourself).
func WithoutMigrate() Option { return func(c *config) { c.noMigrate = true } }

// WithPollInterval sets the longest pause between two checks of a stream by
// the wakeup poller (default 1s); polls start at 10ms after a change and back
// off to this bound while nothing happens.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// Backend stores rheo streams and groups in a MongoDB database. It is safe for
// concurrent use, by many processes at once.
type Backend struct {
	client *mongo.Client
	owned  bool
	db     *mongo.Database
	cfg    config

	streams, groups, batches, pointers, states, heads, meta *mongo.Collection

	// heads caches the last version seen of each chain (a lower bound of
	// its head: versions are never removed), so that finding the head
	// usually costs two point lookups.
	headMu sync.Mutex
	headC  map[string]int64

	rrMu sync.Mutex
	rr   map[string]rotation // by key(stream, group)

	hub    notify.Hub
	poller poller

	closeOnce sync.Once
}

// New returns a backend on database db of a client the caller owns: Close
// does not disconnect it. Call Migrate before use (Open does).
func New(client *mongo.Client, database string, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: client is nil")
	}
	if database == "" {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: database name is empty; name one (the DSN path of mongodb://host/DATABASE)")
	}
	cfg := config{prefix: "rheo_", poll: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if strings.ContainsAny(cfg.prefix, "$\x00") {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: collection prefix %q contains '$' or NUL", cfg.prefix)
	}
	if cfg.poll <= 0 {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: poll interval %v must be positive", cfg.poll)
	}
	db := client.Database(database)
	b := &Backend{
		client: client, db: db, cfg: cfg,
		streams:  db.Collection(cfg.prefix + "streams"),
		groups:   db.Collection(cfg.prefix + "groups"),
		batches:  db.Collection(cfg.prefix + "batches"),
		pointers: db.Collection(cfg.prefix + "pointers"),
		states:   db.Collection(cfg.prefix + "states"),
		heads:    db.Collection(cfg.prefix + "heads"),
		meta:     db.Collection(cfg.prefix + "meta"),
		headC:    map[string]int64{},
		rr:       map[string]rotation{},
	}
	b.poller.init(b)
	b.hub.OnFirst = b.poller.start
	b.hub.OnLast = b.poller.stop
	return b, nil
}

// Open connects to the MongoDB server of a mongodb:// or mongodb+srv:// DSN,
// uses the database its path names, and migrates (unless WithoutMigrate).
// The backend owns the connection: Close disconnects it.
func Open(ctx context.Context, dsn string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "mongodb" && u.Scheme != "mongodb+srv") {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: DSN %q is not a mongodb:// or mongodb+srv:// URL", redact(dsn))
	}
	database := strings.TrimPrefix(u.Path, "/")
	if database == "" {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: DSN %q names no database; add one as its path (mongodb://host:27017/rheo)", redact(dsn))
	}
	if strings.ContainsAny(database, "/\\. \"$") {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: database name %q in DSN is not valid", database)
	}
	copts := options.Client().ApplyURI(dsn)
	if err := copts.Validate(); err != nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "mongo: DSN does not parse: %s", rdsn.ParseError(dsn, func(s string) error {
			return options.Client().ApplyURI(s).Validate()
		}))
	}
	client, err := mongo.Connect(copts)
	if err != nil {
		return nil, rheo.Wrap(rheo.ErrInvalidArgument, err, "mongo: DSN %q", redact(dsn))
	}
	b, err := New(client, database, opts...)
	if err != nil {
		_ = client.Disconnect(context.Background())
		return nil, err
	}
	b.owned = true
	if !b.cfg.noMigrate {
		if err := b.Migrate(ctx); err != nil {
			_ = b.Close()
			return nil, err
		}
	}
	return b, nil
}

func openDSN(ctx context.Context, dsn string) (rheo.Backend, error) { return Open(ctx, dsn) }

// redact hides a DSN's password in error messages.
func redact(dsn string) string { return rdsn.Redact(dsn) }

// Client returns the MongoDB client the backend uses.
func (b *Backend) Client() *mongo.Client { return b.client }

// Database returns the database the backend stores into.
func (b *Backend) Database() *mongo.Database { return b.db }

// Ping implements rheo.Backend.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "mongo: ping")
	}
	return nil
}

// Migrate implements rheo.Backend: it creates the collections and records
// the schema version. Every document is found by its _id, so no secondary
// index is needed beyond the one on groups' stream. It is idempotent and safe
// to run from many processes at once: each step tolerates "already exists".
func (b *Backend) Migrate(ctx context.Context) error {
	existing, err := b.db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "mongo: migrate: list collections")
	}
	have := map[string]bool{}
	for _, n := range existing {
		have[n] = true
	}
	for _, c := range []*mongo.Collection{b.meta, b.streams, b.groups, b.batches, b.pointers, b.states, b.heads} {
		if have[c.Name()] {
			continue
		}
		if err := b.db.CreateCollection(ctx, c.Name()); err != nil && !isNamespaceExists(err) {
			return rheo.Wrap(rheo.ErrAmbiguous, err, "mongo: migrate: create collection %s", c.Name())
		}
	}
	if _, err := b.groups.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "st", Value: 1}},
		Options: options.Index().SetName("rheo_groups_stream"),
	}); err != nil && !isIndexExists(err) {
		return rheo.Wrap(rheo.ErrAmbiguous, err, "mongo: migrate: create index on %s", b.groups.Name())
	}
	_, err = b.meta.InsertOne(ctx, bson.D{{Key: "_id", Value: "schema"}, {Key: "version", Value: SchemaVersion}})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return rheo.Wrap(rheo.ErrAmbiguous, err, "mongo: migrate: record schema version")
	}
	v, err := b.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if v > SchemaVersion {
		return rheo.Errorf(rheo.ErrUnsupported, "mongo: database holds schema version %d, newer than this rheo's %d; upgrade rheo", v, SchemaVersion)
	}
	return nil
}

// SchemaVersion returns the schema version Migrate recorded.
func (b *Backend) SchemaVersion(ctx context.Context) (int, error) {
	var doc struct {
		Version int `bson:"version"`
	}
	if err := b.meta.FindOne(ctx, bson.D{{Key: "_id", Value: "schema"}}).Decode(&doc); err != nil {
		if errors.Is(err, mongo.ErrNoDocuments) {
			return 0, rheo.Errorf(rheo.ErrUnsupported, "mongo: database %s is not migrated; run `rheo migrate` or Backend.Migrate", b.db.Name())
		}
		return 0, rheo.Wrap(rheo.ErrBackendUnavailable, err, "mongo: read schema version")
	}
	return doc.Version, nil
}

// Close stops the poller and, when the backend opened the client, disconnects it.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.poller.shutdown()
		if b.owned {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = b.client.Disconnect(ctx)
		}
	})
	return err
}

// Subscribe implements rheo.Notifier: local changes wake waiters at once,
// changes made by other processes within the poll interval.
func (b *Backend) Subscribe(stream string) (<-chan struct{}, func()) {
	b.poller.watch(stream, 1)
	ch, unsub := b.hub.Subscribe(stream)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			unsub()
			b.poller.watch(stream, -1)
		})
	}
}

func isNamespaceExists(err error) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && (ce.Code == 48 || ce.Name == "NamespaceExists")
}

func isIndexExists(err error) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && (ce.Code == 85 || ce.Code == 86)
}

// readErr classifies an error of a call that wrote nothing.
func readErr(err error, format string, args ...any) error {
	if isCtx(err) {
		return rheo.Wrap(err, err, "mongo: "+format, args...)
	}
	return rheo.Wrap(rheo.ErrBackendUnavailable, err, "mongo: "+format, args...)
}

// writeErr classifies an error of an insert that decides something: unless
// the driver surely never sent it, it may have been applied.
func writeErr(err error, format string, args ...any) error {
	msg := "mongo: " + fmt.Sprintf(format, args...)
	if notSent(err) {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "%s", msg)
	}
	return rheo.Wrap(rheo.ErrAmbiguous, err, "%s", msg)
}

func notSent(err error) bool {
	if errors.Is(err, mongo.ErrClientDisconnected) {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) {
		return true // the server answered with an error: the insert did not apply
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "server selection")
}

func isCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// rotation is where a group's next fetch starts: its step count, for the
// group created with token tok (one created again under the name starts
// over).
type rotation struct {
	tok string
	n   int
}
