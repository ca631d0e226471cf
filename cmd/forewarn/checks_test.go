package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveOnce runs Serve in process on ephemeral ports. It returns the
// error Serve refused to start with, or nil once both APIs listened and
// Serve shut down cleanly again.
func serveOnce(t *testing.T, cfg ServeConfig) error {
	t.Helper()
	cfg.MetadataAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, cfg, slog.New(slog.DiscardHandler), w)
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "operator API listening on ") {
			cancel()
		}
	}
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
		return nil
	}
}

// TestServeRefusesBadValues: --rate-limit, --aws-rate-limit or
// --gce-rate-limit NaN, infinite or negative is refused before anything
// starts.
func TestServeRefusesBadValues(t *testing.T) {
	// A server that wrongly starts stops at once: its context is done.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, flag := range []string{"--rate-limit", "--aws-rate-limit", "--gce-rate-limit"} {
		for _, v := range []string{"NaN", "Inf", "+Inf", "-Inf", "-1", "-0.5"} {
			var stdout, stderr strings.Builder
			code := runServe(ctx, []string{"--data", t.TempDir(), flag, v,
				"--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, &stdout, &stderr)
			if want := "forewarn serve: " + flag + " "; code != 1 || !strings.HasPrefix(stderr.String(), want) || !strings.Contains(stderr.String(), "want 0 (off) or a positive number") {
				t.Errorf("%s %s: exit %d, stderr %q", flag, v, code, stderr.String())
			}
		}
	}
	for _, v := range []string{"-1", "4097", "x"} {
		var stdout, stderr strings.Builder
		code := runServe(ctx, []string{"--data", t.TempDir(), "--request-history", v,
			"--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), "request-history") {
			t.Errorf("--request-history %s: exit %d, stderr %q", v, code, stderr.String())
		}
	}
	for _, v := range []string{"-1", "1048577", "x"} {
		var stdout, stderr strings.Builder
		code := runServe(ctx, []string{"--data", t.TempDir(), "--memory-headroom", v,
			"--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), "memory-headroom") {
			t.Errorf("--memory-headroom %s: exit %d, stderr %q", v, code, stderr.String())
		}
	}
	cfg := defaultServeConfig()
	cfg.DataDir = t.TempDir()
	cfg.RateLimit = 0.5
	cfg.RequestHistory = 0
	if err := serveOnce(t, cfg); err != nil {
		t.Errorf("--rate-limit 0.5 --request-history 0: %v", err)
	}
}

// TestServeChecksTokenFile: a token file others can read or change, or a
// token under 16 bytes, is refused with how to fix it; a generated token
// file, and one the operator fixed, are used.
func TestServeChecksTokenFile(t *testing.T) {
	dir := t.TempDir()
	cfg := defaultServeConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.AdminTokenFile = filepath.Join(dir, "token")
	long := strings.Repeat("0123456789abcdef", 4)

	for _, c := range []struct {
		mode     os.FileMode
		tok, msg string
	}{
		{0o644, long, "admin token file " + cfg.AdminTokenFile + " has mode 0644: others than its owner can read or change it; run: chmod 600 " + cfg.AdminTokenFile},
		{0o640, long, "has mode 0640"},
		{0o604, long, "has mode 0604"},
		{0o620, long, "has mode 0620"},
		{0o600, "s3cret", "admin token in " + cfg.AdminTokenFile + " is 6 bytes, shorter than 16: write a longer random one to it, or delete the file and the server generates one"},
		{0o600, "0123456789abcde\n", "is 15 bytes, shorter than 16"},
	} {
		os.Remove(cfg.AdminTokenFile)
		if err := os.WriteFile(cfg.AdminTokenFile, []byte(c.tok), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cfg.AdminTokenFile, c.mode); err != nil {
			t.Fatal(err)
		}
		err := serveOnce(t, cfg)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("token %q mode %04o: %v; want %q", c.tok, c.mode, err, c.msg)
		}
	}

	// The fix the message gives works.
	os.WriteFile(cfg.AdminTokenFile, []byte(long+"\n"), 0o600)
	os.Chmod(cfg.AdminTokenFile, 0o644)
	if err := serveOnce(t, cfg); err == nil {
		t.Fatal("mode 0644 accepted")
	}
	os.Chmod(cfg.AdminTokenFile, 0o600)
	if err := serveOnce(t, cfg); err != nil {
		t.Fatalf("after chmod 600: %v", err)
	}

	// A generated token file passes its own checks, on this start and the next.
	os.Remove(cfg.AdminTokenFile)
	for i := range 2 {
		if err := serveOnce(t, cfg); err != nil {
			t.Fatalf("generated token file, start %d: %v", i+1, err)
		}
	}
	if fi, err := os.Stat(cfg.AdminTokenFile); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 65 {
		t.Fatalf("generated token file: %v %v", fi, err)
	}
}

// TestServeRefusesLostStore: a data directory that has held state (its
// audit log says so) but whose store is missing or empty is refused,
// naming the file, instead of starting empty with every
// DocumentIncarnation back at 1. New and empty directories start, and so
// does a directory after a clean stop.
func TestServeRefusesLostStore(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	if err := serveOnce(t, cfg); err != nil {
		t.Fatalf("new directory: %v", err)
	}
	if err := serveOnce(t, cfg); err != nil {
		t.Fatalf("restart: %v", err)
	}
	store := filepath.Join(cfg.DataDir, "forewarn.db")
	backup, err := os.ReadFile(store)
	if err != nil {
		t.Fatal(err)
	}

	os.Remove(store)
	err = serveOnce(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "store "+store+" is missing, but the audit.log beside it") ||
		!strings.Contains(err.Error(), "DocumentIncarnation back to 1") {
		t.Fatalf("missing store: %v", err)
	}
	if _, err := os.Stat(store); err == nil {
		t.Fatal("the refused start created the store")
	}
	os.WriteFile(store, nil, 0o600)
	err = serveOnce(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "store "+store+" is empty (0 bytes)") {
		t.Fatalf("empty store: %v", err)
	}
	if fi, _ := os.Stat(store); fi.Size() != 0 {
		t.Fatal("the refused start wrote the store")
	}

	// Restoring the file, as the message says, works.
	os.WriteFile(store, backup, 0o600)
	if err := serveOnce(t, cfg); err != nil {
		t.Fatalf("restored store: %v", err)
	}
	// An existing empty directory is new.
	cfg.DataDir = t.TempDir()
	if err := serveOnce(t, cfg); err != nil {
		t.Fatalf("empty directory: %v", err)
	}
	// So is a 0-byte store with nothing beside it (a crash while the
	// very first start created it).
	cfg.DataDir = t.TempDir()
	os.WriteFile(filepath.Join(cfg.DataDir, "forewarn.db"), nil, 0o600)
	if err := serveOnce(t, cfg); err != nil {
		t.Fatalf("0-byte store alone: %v", err)
	}
}
