package main

// The command opens stores by DSN; each backend registers its scheme when
// its package is imported.
import (
	_ "github.com/rheo-go/rheo/backend/memory"
	_ "github.com/rheo-go/rheo/backend/mongo"
	_ "github.com/rheo-go/rheo/backend/postgres"
	_ "github.com/rheo-go/rheo/backend/redis"
	_ "github.com/rheo-go/rheo/backend/sqlite"
)
