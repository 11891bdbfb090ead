// Package id generates event IDs and lease fencing tokens.
package id

import (
	"github.com/google/uuid"
)

func init() {
	// A pool of random bytes makes UUID generation several times cheaper;
	// it must be enabled before any concurrent use, hence init.
	uuid.EnableRandPool()
}

// Event returns a new event ID: a UUIDv7, so IDs sort roughly by creation.
func Event() string {
	u, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return u.String()
}

// Token returns a new random fencing token (a UUIDv4 string).
func Token() string { return uuid.NewString() }

// ValidToken reports whether s has the shape of a token made by Token.
func ValidToken(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}
