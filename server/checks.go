package server

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"

	"github.com/forewarn/forewarn"
)

// Files of a data directory.
const (
	storeFile = "forewarn.db"
	auditFile = "audit.log"
)

// minTokenBytes is the shortest operator token the server accepts.
const minTokenBytes = 16

// checkRateLimit reports whether rate is a usable --rate-limit: 0 (off)
// or a positive finite number of requests a second.
func checkRateLimit(flag string, rate float64) error {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		return forewarn.Errorf(forewarn.EINVALID, "%s %v: want 0 (off) or a positive number of requests a second", flag, rate)
	}
	return nil
}

// checkToken reports whether the token tok read from the file at path,
// whose mode is mode, may guard the operator API: the file must be
// readable and writable by its owner alone, and the token at least
// minTokenBytes long. Each refusal says how to fix it.
func checkToken(path string, mode fs.FileMode, tok string) error {
	// Windows has no group and other permission bits to check.
	if perm := mode.Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return forewarn.Errorf(forewarn.EINVALID, "admin token file %s has mode %04o: others than its owner can read or change it; run: chmod 600 %s", path, perm, path)
	}
	if len(tok) < minTokenBytes {
		return forewarn.Errorf(forewarn.EINVALID, "admin token in %s is %d bytes, shorter than %d: write a longer random one to it, or delete the file and the server generates one", path, len(tok), minTokenBytes)
	}
	return nil
}

// checkDataDir refuses a data directory that has held state but whose
// store is missing or empty: opening it would start an empty store, and
// every VM's DocumentIncarnation would go back to 1. The audit log is
// the evidence of earlier state, since the server creates the store
// before it. A new or empty directory passes.
func checkDataDir(dir string) error {
	store := filepath.Join(dir, storeFile)
	info, err := os.Stat(store)
	switch {
	case err == nil && info.Size() > 0:
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store %s: %w", store, err)
	}
	audit, err := os.Stat(filepath.Join(dir, auditFile))
	if err != nil {
		return nil // no sign that a server has run here
	}
	what := "is missing"
	if info != nil {
		what = "is empty (0 bytes)"
	}
	return forewarn.Errorf(forewarn.EINVALID, "store %s %s, but the %s beside it (%d bytes) shows that a server has run there: starting with an empty store would send every VM's DocumentIncarnation back to 1; restore %s from a backup, or move %s aside to start afresh",
		store, what, auditFile, audit.Size(), storeFile, dir)
}
