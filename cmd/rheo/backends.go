package main

// The command opens stores by DSN; each backend registers its scheme when
// its package is imported.
import (
	"context"
	"errors"
	"strings"

	"github.com/rheo-go/rheo"
	_ "github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/mongo"
	_ "github.com/rheo-go/rheo/backend/postgres"
	_ "github.com/rheo-go/rheo/backend/redis"
	_ "github.com/rheo-go/rheo/backend/sqlite"
)

// openStore opens the client of a DSN as rheo.Open does, except that a
// MongoDB database is opened without its migration (mongo.Open migrates
// by default, and MongoDB creates a database on its first write): a shared
// store is migrated only by 'rheo migrate', so a mistyped database name is
// an error, not a new database left behind.
func openStore(ctx context.Context, dsn string, opts ...rheo.Option) (*rheo.Client, error) {
	if !isMongo(dsn) {
		return rheo.Open(ctx, dsn, opts...)
	}
	b, err := mongo.Open(ctx, dsn, mongo.WithoutMigrate())
	if err != nil {
		return nil, err
	}
	return rheo.New(b, opts...), nil
}

func isMongo(dsn string) bool {
	return strings.HasPrefix(dsn, "mongodb:") || strings.HasPrefix(dsn, "mongodb+srv:")
}

// requireMigrated fails, naming 'rheo migrate', when c's store is a MongoDB
// database that was never migrated or is behind this rheo. (PostgreSQL
// says so itself on the first statement, its tables being missing; MongoDB
// would create its collections instead.) It only reads.
func requireMigrated(ctx context.Context, c *rheo.Client) error {
	b, ok := c.Backend().(*mongo.Backend)
	if !ok {
		return nil
	}
	v, err := b.SchemaVersion(ctx)
	if errors.Is(err, rheo.ErrUnsupported) {
		return rheo.Errorf(rheo.ErrMisconfigured, "mongo: database %s is not migrated: run `rheo migrate --dsn DSN` first (or check the database name in the DSN)", b.Database().Name())
	}
	if err != nil {
		return err
	}
	if v < mongo.SchemaVersion {
		return rheo.Errorf(rheo.ErrMisconfigured, "mongo: database %s is at schema version %d, this rheo needs %d: run `rheo migrate --dsn DSN`", b.Database().Name(), v, mongo.SchemaVersion)
	}
	return nil
}
