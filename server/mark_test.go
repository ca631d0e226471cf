package server_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/server"
)

// TestMark: the embedded store's data directory holds the incarnation
// mark, the store's revision and highest incarnation, current after a
// commit; a mark that is not one the server wrote refuses the start,
// saying how to recover, and changes nothing.
func TestMark(t *testing.T) {
	dir := t.TempDir()
	cfg := memConfig(t)
	cfg.Store, cfg.DataDir = server.StoreBolt, dir
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Engine().CreateAll(t.Context(), spec("web_0")); err != nil {
		t.Fatal(err)
	}
	rev := s.Engine().Revision()
	inc := s.Engine().View("web_0").Incarnation
	b, err := os.ReadFile(filepath.Join(dir, "incarnation.mark"))
	if want := strings.Join([]string{pad(rev), pad(inc)}, " ") + "\n"; err != nil || string(b) != want {
		t.Fatalf("mark %q, %v; want %q", b, err, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(dir, "incarnation.mark"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = server.New(t.Context(), cfg)
	if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.Contains(forewarn.ErrorMessage(err),
		"incarnation.mark is unreadable (7 bytes): if forewarn.db is the newest copy of the store, delete the mark and start again") {
		t.Fatalf("garbage mark: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "incarnation.mark")); string(b) != "garbage" {
		t.Fatalf("the refused start changed the mark: %q", b)
	}
}

func pad(n int64) string { s := strings.Repeat("0", 20) + itoa(n); return s[len(s)-20:] }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func spec(vm string) engine.Spec { return engine.Spec{Type: forewarn.Freeze, VMs: []string{vm}} }
