package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/storetest"
	bbolt "go.etcd.io/bbolt"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) forewarn.Store {
		return open(t, filepath.Join(t.TempDir(), "forewarn.db"))
	})
}

func TestDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) forewarn.Store {
		return open(t, filepath.Join(dir, "forewarn.db"))
	})
}

func TestOpenCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "forewarn")
	path := filepath.Join(dir, "forewarn.db")
	s := open(t, path)
	defer s.Close()
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	for name, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode(), want)
		}
	}
}

func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forewarn.db")
	s := open(t, path)
	defer s.Close()

	start := time.Now()
	s2, err := Open(path)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a file in use succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("second Open: %v, want ErrLocked naming %s", err, path)
	}
	if d := time.Since(start); d > 5*lockTimeout {
		t.Errorf("second Open took %v to fail", d)
	}

	// Once the first store lets go, the file opens again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path).Close()
}

// TestOpenCorrupt checks that Open refuses a damaged file, names it, and
// lets go of it.
func TestOpenCorrupt(t *testing.T) {
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + i/4096)
		}
		return b
	}
	tests := map[string]func(t *testing.T, path string){
		"garbage": func(t *testing.T, path string) {
			write(t, path, garbage(64<<10))
		},
		"short garbage": func(t *testing.T, path string) {
			write(t, path, []byte("not a bolt file\n"))
		},
		"truncated small": func(t *testing.T, path string) {
			fill(t, path, 3)
			truncateHalf(t, path)
		},
		"truncated large": func(t *testing.T, path string) {
			fill(t, path, 500)
			truncateHalf(t, path)
		},
		"scribbled pages": func(t *testing.T, path string) {
			fill(t, path, 500)
			scribble(t, path, 2*os.Getpagesize(), garbage(64<<10))
		},
		"bad record": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, eventsBucket, []byte("ABC"), []byte("{not json"))
		},
		"record under wrong key": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, eventsBucket, []byte("ABC"), []byte(`{"id":"DEF"}`))
		},
		"bad incarnation": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, incarnationsBucket, []byte("vm-a"), []byte{1, 2})
		},
		"bad VM record": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, vmsBucket, []byte("vm-a"), []byte("{not json"))
		},
		"bad VM record time": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, vmsBucket, []byte("vm-a"), []byte(`{"lastSeen":"yesterday"}`))
		},
		"bad definition": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, inventoryBucket, []byte("vm-a"), []byte(`{"vm":{"name":"vm-a","ip":"not an address"},"seq":1}`))
		},
		"definition under wrong key": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, inventoryBucket, []byte("vm-a"), []byte(`{"vm":{"name":"vm-b"},"seq":1}`))
		},
		"definition without a VM": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, inventoryBucket, []byte("vm-a"), []byte(`{"seq":1}`))
		},
		"scale set definition under wrong key": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, inventorySetsBucket, []byte("ss-a"), []byte(`{"name":"ss-b"}`))
		},
		"session under wrong key": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, sessionsBucket, []byte("ses-a"), []byte(`{"id":"ses-b"}`))
		},
		"bad session": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, sessionsBucket, []byte("ses-a"), []byte(`{"id":"ses-a","created":"yesterday"}`))
		},
		"bad inventory revision": func(t *testing.T, path string) {
			fill(t, path, 3)
			rawPut(t, path, metaBucket, inventoryRevisionKey, []byte{0, 3})
		},
		"only a vms bucket": func(t *testing.T, path string) {
			rawPut(t, path, vmsBucket, []byte("vm-a"), []byte("{}"))
		},
		"foreign bolt file": func(t *testing.T, path string) {
			rawPut(t, path, []byte("something"), []byte("k"), []byte("v"))
		},
	}
	for name, damage := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "forewarn.db")
			damage(t, path)
			s, err := Open(path)
			if err == nil {
				s.Close()
				t.Fatal("Open of a damaged file succeeded")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("Open: %v, want an error naming %s", err, path)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Open: %v, want ErrCorrupt", err)
			}
			t.Log(err)
			// The failed Open let go of the file: a second one finds it
			// damaged, not locked.
			if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
				t.Errorf("second Open: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestOpenOldLayout checks that a file written before the "vms" bucket
// existed opens with its data, gains the newer buckets, and keeps VM
// records.
func TestOpenOldLayout(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "forewarn.db")
	e := &forewarn.Event{
		ID:        "0B4A4C61-2A5F-4E0C-9C5B-000000000001",
		Type:      forewarn.Reboot,
		Status:    forewarn.Scheduled,
		Resources: []string{"vm-a"},
		NotBefore: time.Date(2026, 3, 1, 9, 15, 0, 0, time.UTC),
		Duration:  -1,
		Source:    forewarn.Platform,
		Lasts:     5 * time.Minute,
		Created:   time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC),
	}
	// The first layout, as that version wrote it: three buckets, and an
	// event without the newer fields.
	rawPut(t, path, eventsBucket, []byte(e.ID), []byte(`{"id":"`+e.ID+`","type":"Reboot","status":"Scheduled",`+
		`"resources":["vm-a"],"notBefore":"2026-03-01T09:15:00Z","durationInSeconds":-1,"source":"Platform",`+
		`"description":"","created":"2026-03-01T09:00:00Z","lasts":"5m0s"}`))
	rawPut(t, path, incarnationsBucket, []byte("vm-a"), putInt(3))
	rawPut(t, path, metaBucket, revisionKey, putInt(4))
	if got := rawBuckets(t, path); strings.Join(got, ",") != "events,incarnations,meta" {
		t.Fatalf("old-layout file has buckets %v", got)
	}

	s := open(t, path)
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if st.Revision != 4 || len(st.Events) != 1 || st.Events[0].ID != e.ID || st.Incarnations["vm-a"] != 3 {
		t.Errorf("Load of an old-layout file = revision %d, events %v, incarnations %v; want 4, [%s], vm-a:3",
			st.Revision, st.Events, st.Incarnations, e.ID)
	}
	if st.VMs == nil || len(st.VMs) != 0 {
		t.Errorf("Load of an old-layout file returned VMs %v, want an empty map", st.VMs)
	}
	if st.Inventory == nil || len(st.Inventory) != 0 || st.InventorySets == nil || len(st.InventorySets) != 0 || st.InventoryRevision != 0 {
		t.Errorf("Load of an old-layout file returned inventory %v, sets %v, revision %d; want empty maps and 0",
			st.Inventory, st.InventorySets, st.InventoryRevision)
	}
	if st.Sessions == nil || len(st.Sessions) != 0 {
		t.Errorf("Load of an old-layout file returned sessions %v, want an empty map", st.Sessions)
	}
	if st.Sightings == nil || len(st.Sightings) != 0 || st.SigningKeys != nil {
		t.Errorf("Load of an old-layout file returned sightings %v, signing keys %v; want an empty map and none", st.Sightings, st.SigningKeys)
	}
	seen := time.Date(2026, 3, 1, 11, 0, 0, 42, time.FixedZone("CET", 3600))
	if _, err := s.Commit(ctx, &forewarn.Change{
		Revision: 4,
		VMs:      map[string]*forewarn.VMRecord{"vm-a": {LastSeen: seen}},
	}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := rawBuckets(t, path); strings.Join(got, ",") != "events,incarnations,inventory,inventorysets,meta,scalesets,sessions,sightings,vms" {
		t.Errorf("after Open the file has buckets %v, want inventory, inventorysets, scalesets, sessions, sightings and vms added", got)
	}

	s = open(t, path)
	defer s.Close()
	st, err = s.Load(ctx)
	if err != nil {
		t.Fatalf("Load after reopen: %v", err)
	}
	if st.Revision != 5 || len(st.Events) != 1 || st.Incarnations["vm-a"] != 3 {
		t.Errorf("Load after reopen = revision %d, events %v, incarnations %v; want 5, one event, vm-a:3",
			st.Revision, st.Events, st.Incarnations)
	}
	if r := st.VMs["vm-a"]; len(st.VMs) != 1 || r == nil || !r.LastSeen.Equal(seen) || r.LastSeen.Location() != time.UTC {
		t.Errorf("VMs after reopen = %v, want vm-a last seen %v in UTC", st.VMs, seen.UTC())
	}
}

// TestOpenNoWrite checks that opening a current file changes nothing in
// it: only a file that lacks buckets is written on open.
func TestOpenNoWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forewarn.db")
	fill(t, path, 1)
	txid := func() int {
		db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.Begin(false)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		return tx.ID()
	}
	before := txid()
	open(t, path).Close()
	if after := txid(); after != before {
		t.Errorf("Open of a current file moved the transaction ID from %d to %d", before, after)
	}
}

// fill creates a store at path holding n events, and closes it.
func fill(t *testing.T, path string, n int) {
	t.Helper()
	s := open(t, path)
	defer s.Close()
	for i := range n {
		e := &forewarn.Event{
			ID:          fmt.Sprintf("EVENT-%04d", i),
			Type:        forewarn.Reboot,
			Status:      forewarn.Scheduled,
			Resources:   []string{"vm-a", "vm-b"},
			Description: strings.Repeat("maintenance ", 20),
		}
		if _, err := s.Commit(t.Context(), &forewarn.Change{Revision: int64(i), Events: []*forewarn.Event{e}}); err != nil {
			t.Fatal(err)
		}
	}
}

// truncateHalf cuts the file at path to half the pages it uses: the
// file's room to grow beyond them (allocSize) is not enough.
func truncateHalf(t *testing.T, path string) {
	t.Helper()
	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	err = db.View(func(tx *bbolt.Tx) error {
		used = tx.Size()
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, used/2); err != nil {
		t.Fatal(err)
	}
}

// scribble overwrites the file at path with b from offset off on.
func scribble(t *testing.T, path string, off int, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// rawPut writes a record with bbolt directly, bypassing the store.
func rawPut(t *testing.T, path string, bucket, k, v []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.Put(k, v)
	}); err != nil {
		t.Fatal(err)
	}
}

// rawBuckets lists the file's top-level buckets, in order.
func rawBuckets(t *testing.T, path string) []string {
	t.Helper()
	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var names []string
	if err := db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			names = append(names, string(name))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestFirstLoadIsTheCheck: the first Load after Open returns the state
// Open's check decoded, equal to what a fresh read of the file gives, and
// only once; a Commit before the first Load drops it, so the Load sees
// the commit.
func TestFirstLoadIsTheCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forewarn.db")
	fill(t, path, 3)
	s := open(t, path)
	kept := s.first.Load()
	if kept == nil || kept.Revision != 3 || len(kept.Events) != 3 {
		t.Fatalf("after Open, the kept state is %+v; want revision 3 with 3 events", kept)
	}
	first, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if first != kept || again == kept || s.first.Load() != nil {
		t.Errorf("first Load %p, second %p, kept %p (now %p): want the kept state once, then a read", first, again, kept, s.first.Load())
	}
	if !reflect.DeepEqual(first, again) {
		t.Errorf("the kept state differs from a read of the file:\n%+v\n%+v", first, again)
	}
	s.Close()

	s = open(t, path)
	defer s.Close()
	e := &forewarn.Event{ID: "LATE", Type: forewarn.Reboot, Status: forewarn.Scheduled, Resources: []string{"vm-a"}}
	if _, err := s.Commit(t.Context(), &forewarn.Change{Revision: 3, Events: []*forewarn.Event{e}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != 4 || len(st.Events) != 4 {
		t.Errorf("Load after a commit: revision %d, %d events; want 4 and 4", st.Revision, len(st.Events))
	}
}
