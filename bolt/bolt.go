// Package bolt implements forewarn.Store on a bbolt file, the embedded
// default store.
//
// The file holds nine buckets: "events" maps an event ID to the event's
// JSON, "incarnations" maps a VM name to its DocumentIncarnation, "vms"
// maps a VM name to the JSON of its forewarn.VMRecord, "scalesets" maps a
// scale set name to the JSON of its forewarn.ScaleSetRecord, "inventory"
// maps a VM name to the JSON of its forewarn.Definition, "inventorysets"
// maps a scale set name to the JSON of its definition (forewarn.ScaleSet),
// "sessions" maps a maintenance session's ID to the JSON of its
// forewarn.Session, written whole (a session of 1,000 hosts is a value
// of a few hundred kilobytes, which bbolt keeps on overflow pages),
// "sightings" maps an event ID to the JSON of its forewarn.Sighting, and
// "meta" holds the store's "revision", its "inventoryRevision" (absent
// until a commit names the inventory) and the JSON of its "signingKeys"
// (absent until a commit sets them); numbers are 8-byte big-endian.
// Every Commit is one bbolt transaction, synced to disk before it
// returns. A file written before "vms", "scalesets", "inventory",
// "inventorysets", "sessions" or "sightings" existed is valid: Open adds
// them.
//
// Only one process may open a file at a time. Open checks the whole file
// and refuses a damaged one rather than serve partial or empty data.
package bolt

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/codec"
	"github.com/forewarn/forewarn/internal/watch"
	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

var _ forewarn.Store = (*Store)(nil)

// Errors returned by Open, wrapped with the file's path.
var (
	// ErrLocked means another process has the file open.
	ErrLocked = errors.New("database is locked by another process")
	// ErrCorrupt means the file is not a readable Forewarn store.
	ErrCorrupt = errors.New("corrupt store file")
)

// lockTimeout bounds how long Open waits for another process to let go
// of the file.
const lockTimeout = time.Second

// allocSize is how much room the file gains beyond what a commit needs
// when it grows (bbolt's AllocSize, 16 MiB by default, would make a new
// store's file that large).
const allocSize = 1 << 20

var (
	eventsBucket         = []byte("events")
	incarnationsBucket   = []byte("incarnations")
	metaBucket           = []byte("meta")
	vmsBucket            = []byte("vms")
	scaleSetsBucket      = []byte("scalesets")
	inventoryBucket      = []byte("inventory")
	inventorySetsBucket  = []byte("inventorysets")
	sessionsBucket       = []byte("sessions")
	sightingsBucket      = []byte("sightings")
	revisionKey          = []byte("revision")
	inventoryRevisionKey = []byte("inventoryRevision")
	signingKeysKey       = []byte("signingKeys")
)

// mmapSize returns the address space a store maps at open. bbolt maps
// the file and maps it again each time it outgrows the mapping, and each
// new mapping copies every key and value the transaction in progress has
// touched out of the old one (and waits for every Load in progress): a
// commit of 100,000 definitions to a new file took 600 ms and allocated
// 630 MB, against 350 ms and 200 MB mapped at 1 GiB from the start. A
// mapping is no memory: the file still grows only as it fills, by
// allocSize beyond what a commit needs. On Windows bbolt grows the file
// to the mapping, and a 32-bit address space is short, so there the
// mapping grows as it would by default.
func mmapSize() int {
	if strconv.IntSize < 64 || runtime.GOOS == "windows" {
		return 0
	}
	return 1 << 30
}

// Store is a forewarn.Store backed by a bbolt file. It is safe for
// concurrent use.
type Store struct {
	path string
	db   *bbolt.DB

	mu     sync.Mutex // guards the fields below
	closed bool
	log    watch.Log // the followers
	// first is the state the check at open decoded, for the first Load:
	// a restart decodes every record once. Commit drops it.
	first atomic.Pointer[forewarn.State]
}

// Open opens the store at path, creating the file (mode 0600) and its
// directory (mode 0700) when missing. It fails with ErrLocked when
// another process holds the file, and with ErrCorrupt when the file is
// not a valid store; every error names the path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db, first, err := openDB(path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{path: path, db: db}
	var rev int64
	if err := db.View(func(tx *bbolt.Tx) error {
		rev = getInt(tx.Bucket(metaBucket).Get(revisionKey))
		return nil
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if first != nil && first.Revision == rev {
		// What the check read is the state now, unless a writer came
		// between the check and the open.
		s.first.Store(first)
	}
	s.log.Reset(rev)
	return s, nil
}

// openDB checks the file at path, then opens it for writing and creates
// the buckets it lacks: all of them in a new store, the newer ones in a
// store written before they existed.
func openDB(path string) (*bbolt.DB, *forewarn.State, error) {
	st, missing, err := verify(path)
	if err != nil {
		return nil, nil, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: lockTimeout, InitialMmapSize: mmapSize()})
	if err != nil {
		return nil, nil, classify(err)
	}
	db.AllocSize = allocSize
	if len(missing) > 0 {
		err := db.Update(func(tx *bbolt.Tx) error {
			for _, name := range missing {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return fmt.Errorf("create bucket %s: %w", name, err)
				}
			}
			return nil
		})
		if err != nil {
			_ = db.Close()
			return nil, nil, err
		}
	}
	return db, st, nil
}

// verify opens an existing file read-only and checks all of it, and
// returns the buckets it lacks: every bucket when it holds no store yet,
// none or only the newer ones when it does. It runs before the file is
// opened for writing because bbolt, opening a damaged file for writing,
// can panic or fault on its memory-mapped pages in a way that leaves the
// file mapped and locked. Here a fault or panic becomes an ErrCorrupt
// error, and the file is closed.
func verify(path string) (st *forewarn.State, missing [][]byte, err error) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, allBuckets, nil
	case err != nil:
		return nil, nil, err
	case info.Size() == 0:
		return nil, allBuckets, nil // bbolt initializes an empty file
	}

	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return nil, nil, classify(err)
	}
	defer db.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			st, missing, err = nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, r)
		}
	}()
	err = db.View(func(tx *bbolt.Tx) error {
		st, missing, err = check(tx, info.Size())
		return err
	})
	return st, missing, err
}

// allBuckets lists every bucket of a store, those of the first layout
// first.
var allBuckets = [][]byte{eventsBucket, incarnationsBucket, metaBucket, vmsBucket, scaleSetsBucket, inventoryBucket, inventorySetsBucket,
	sessionsBucket, sightingsBucket}

// classify maps an error from bbolt.Open to ErrLocked or ErrCorrupt when
// it is one, and returns other errors (a missing directory, permissions)
// as they are.
func classify(err error) error {
	var errno syscall.Errno
	var pathErr *fs.PathError
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return ErrLocked
	case errors.As(err, &pathErr), errors.As(err, &errno):
		return err
	}
	// Invalid meta pages, a wrong version, a file too short to hold
	// them.
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

// check reads every record of a file of size bytes, runs bbolt's own
// consistency check, and returns the buckets the file lacks: all of them
// when it holds no buckets at all (a new file), "vms", "scalesets", the
// inventory's or "sessions" when it was written before they existed.
// It returns the state the records hold, as Load would, but for a new
// file.
func check(tx *bbolt.Tx, size int64) (st *forewarn.State, missing [][]byte, err error) {
	if tx.Size() > size {
		return nil, nil, fmt.Errorf("%w: file is %d bytes, its pages need %d", ErrCorrupt, size, tx.Size())
	}

	empty := true
	if err := tx.ForEach(func([]byte, *bbolt.Bucket) error {
		empty = false
		return nil
	}); err != nil {
		return nil, nil, err
	}
	if empty {
		return nil, allBuckets, nil
	}

	events, incs, meta := tx.Bucket(eventsBucket), tx.Bucket(incarnationsBucket), tx.Bucket(metaBucket)
	if events == nil || incs == nil || meta == nil {
		return nil, nil, fmt.Errorf("%w: not a forewarn store (missing buckets)", ErrCorrupt)
	}
	for _, k := range [][]byte{revisionKey, inventoryRevisionKey} {
		if v := meta.Get(k); v != nil && len(v) != 8 {
			return nil, nil, fmt.Errorf("%w: %s is %d bytes, want 8", ErrCorrupt, k, len(v))
		}
	}
	if _, err := codec.SigningKeys(meta.Get(signingKeysKey)); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, signingKeysKey, err)
	}
	if err := incs.ForEach(func(k, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: incarnation of %q is %d bytes, want 8", ErrCorrupt, k, len(v))
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for _, name := range [][]byte{vmsBucket, scaleSetsBucket, inventoryBucket, inventorySetsBucket, sessionsBucket, sightingsBucket} {
		if tx.Bucket(name) == nil {
			missing = append(missing, name) // written before the bucket existed
		}
	}
	// Every record decodes: the state Load would return, kept for the
	// first Load (a bucket the file lacks reads as empty, as it will
	// once created).
	if st, err = loadTx(tx); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}

	// Check reports every problem; keep the first and drain the rest so
	// its goroutine is done with the pages before the file closes.
	var first error
	for err := range tx.Check() {
		if first == nil {
			first = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	if first != nil {
		return nil, nil, first
	}
	return st, missing, nil
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Load returns the current state, read in one transaction (the first
// Load after Open returns what Open's check read, when nothing was
// committed since). It returns EUNAVAILABLE after Close.
func (s *Store) Load(ctx context.Context) (*forewarn.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, errClosed()
	}
	st := s.first.Swap(nil)
	if st != nil {
		return st, nil // decoded by the check at open; nothing committed since
	}
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		st, err = loadTx(tx)
		return err
	})
	if err != nil {
		return nil, s.wrap("load", err)
	}
	releaseMapping(s.db) // it read the whole file
	return st, nil
}

// Commit applies c in one synced transaction and returns the new
// revision. It returns ECONFLICT when c.Revision is not the current
// revision, EINVALID when c would lower an incarnation or fails
// Change.Validate (an event without an ID, a nil or unnamed VM record, a
// definition or a session under another name), and EUNAVAILABLE after
// Close; in each case nothing is written.
func (s *Store) Commit(ctx context.Context, c *forewarn.Change) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := c.Validate(); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, errClosed()
	}
	s.first.Store(nil) // the open's state is no longer current
	u := &forewarn.Change{
		Events:       make([]*forewarn.Event, len(c.Events)),
		Deletes:      slices.Clone(c.Deletes),
		Incarnations: maps.Clone(c.Incarnations),
		VMs:          make(map[string]*forewarn.VMRecord, len(c.VMs)),
		ScaleSets:    make(map[string]*forewarn.ScaleSetRecord, len(c.ScaleSets)),
	}
	records := make([][]byte, len(c.Events))
	if err := inParts(len(c.Events), func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			e := c.Events[i]
			u.Events[i] = e.Normalized()
			// MarshalJSON's output is compact already: json.Marshal
			// would only check and copy it again.
			b, err := u.Events[i].MarshalJSON()
			if err != nil {
				return forewarn.Errorf(forewarn.EINVALID, "event %s: %v", e.ID, err)
			}
			records[i] = b
		}
		return nil
	}); err != nil {
		return 0, err
	}
	vmRecords := make(map[string][]byte, len(c.VMs))
	for vm, r := range c.VMs {
		u.VMs[vm] = r.Normalized()
		b, err := json.Marshal(u.VMs[vm])
		if err != nil {
			return 0, forewarn.Errorf(forewarn.EINVALID, "VM record for %s: %v", vm, err)
		}
		vmRecords[vm] = b
	}
	setRecords := make(map[string][]byte, len(c.ScaleSets))
	for name, r := range c.ScaleSets {
		u.ScaleSets[name] = new(*r)
		b, err := json.Marshal(r)
		if err != nil {
			return 0, forewarn.Errorf(forewarn.EINVALID, "scale set record for %s: %v", name, err)
		}
		setRecords[name] = b
	}

	// Keys go in sorted: bbolt inserts into a node's sorted array, so a
	// fleet's worth of keys in random order would cost their square.
	defNames := slices.Sorted(maps.Keys(c.Inventory))
	defs, err := codec.Encode(defNames, c.Inventory)
	if err != nil {
		return 0, forewarn.Errorf(forewarn.EINVALID, "definition of %v", err)
	}
	setNames := slices.Sorted(maps.Keys(c.InventorySets))
	invSets, err := codec.Encode(setNames, c.InventorySets)
	if err != nil {
		return 0, forewarn.Errorf(forewarn.EINVALID, "scale set definition %v", err)
	}
	if len(defNames) > 0 {
		// The followers share the committer's definitions, which no one
		// modifies (Change): a fleet of 100,000 is not held twice.
		u.Inventory = maps.Clone(c.Inventory)
	}
	if len(setNames) > 0 {
		u.InventorySets = make(map[string]*forewarn.ScaleSet, len(setNames))
		for name, d := range c.InventorySets {
			if d != nil {
				d = new(*d)
			}
			u.InventorySets[name] = d
		}
	}
	// Sessions are kept and sent as Load returns them; the followers get
	// copies the committer cannot modify.
	sesIDs := slices.Sorted(maps.Keys(c.Sessions))
	if len(sesIDs) > 0 {
		u.Sessions = codec.NormalizedSessions(c.Sessions)
	}
	sessions, err := codec.Encode(sesIDs, u.Sessions)
	if err != nil {
		return 0, forewarn.Errorf(forewarn.EINVALID, "session %v", err)
	}
	var keys []byte
	if c.SigningKeys != nil {
		u.SigningKeys = c.SigningKeys.Normalized()
		if keys, err = json.Marshal(u.SigningKeys); err != nil {
			return 0, forewarn.Errorf(forewarn.EINVALID, "signing keys: %v", err)
		}
	}
	sightIDs := slices.Sorted(maps.Keys(c.Sightings))
	if len(sightIDs) > 0 {
		u.Sightings = make(map[string]*forewarn.Sighting, len(sightIDs))
		for id, si := range c.Sightings {
			u.Sightings[id] = si.Normalized()
		}
	}
	sightings, err := codec.Encode(sightIDs, u.Sightings)
	if err != nil {
		return 0, forewarn.Errorf(forewarn.EINVALID, "sighting of event %v", err)
	}
	incNames := slices.Sorted(maps.Keys(c.Incarnations))
	// Events by ID, stably: of two with one ID the last is put last, and
	// stays.
	eventOrder := make([]int, len(c.Events))
	for i := range eventOrder {
		eventOrder[i] = i
	}
	// (The index breaks ties: an unstable sort, which is several times
	// faster than a stable one on a fleet-wide event's 100,000.)
	slices.SortFunc(eventOrder, func(a, b int) int {
		return cmp.Or(strings.Compare(c.Events[a].ID, c.Events[b].ID), cmp.Compare(a, b))
	})
	var rev int64
	err = s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		cur := getInt(meta.Get(revisionKey))
		if c.Revision != cur {
			return forewarn.Errorf(forewarn.ECONFLICT, "change is against revision %d, store is at %d", c.Revision, cur)
		}
		incs := tx.Bucket(incarnationsBucket)
		for _, vm := range incNames {
			if v, n := incs.Get([]byte(vm)), c.Incarnations[vm]; v != nil && n < getInt(v) {
				return forewarn.Errorf(forewarn.EINVALID, "incarnation of %s would go back from %d to %d", vm, getInt(v), n)
			}
		}
		events := tx.Bucket(eventsBucket)
		for _, i := range eventOrder {
			e := c.Events[i]
			if err := events.Put([]byte(e.ID), records[i]); err != nil {
				return fmt.Errorf("put event %s: %w", e.ID, err)
			}
		}
		if err := putBatch(tx.Bucket(sightingsBucket), sightIDs, sightings); err != nil {
			return fmt.Errorf("sighting of event %w", err)
		}
		for _, id := range c.Deletes {
			if id == "" {
				continue // no event has an empty ID
			}
			if err := events.Delete([]byte(id)); err != nil {
				return fmt.Errorf("delete event %s: %w", id, err)
			}
			// Its sighting leaves with it.
			if err := tx.Bucket(sightingsBucket).Delete([]byte(id)); err != nil {
				return fmt.Errorf("delete sighting of event %s: %w", id, err)
			}
		}
		if keys != nil {
			if err := meta.Put(signingKeysKey, keys); err != nil {
				return fmt.Errorf("put signing keys: %w", err)
			}
		}
		for _, vm := range incNames {
			if err := incs.Put([]byte(vm), putInt(c.Incarnations[vm])); err != nil {
				return fmt.Errorf("put incarnation of %s: %w", vm, err)
			}
		}
		vms := tx.Bucket(vmsBucket)
		for _, name := range defNames {
			if c.Inventory[name] == nil && vmRecords[name] == nil {
				// A VM's record leaves the store with it.
				if err := vms.Delete([]byte(name)); err != nil {
					return fmt.Errorf("delete VM record of %s: %w", name, err)
				}
			}
		}
		for _, vm := range slices.Sorted(maps.Keys(vmRecords)) {
			if err := vms.Put([]byte(vm), vmRecords[vm]); err != nil {
				return fmt.Errorf("put VM record of %s: %w", vm, err)
			}
		}
		sets := tx.Bucket(scaleSetsBucket)
		for name, b := range setRecords {
			if err := sets.Put([]byte(name), b); err != nil {
				return fmt.Errorf("put scale set record of %s: %w", name, err)
			}
		}
		if err := putBatch(tx.Bucket(inventoryBucket), defNames, defs); err != nil {
			return fmt.Errorf("definition of %w", err)
		}
		if err := putBatch(tx.Bucket(inventorySetsBucket), setNames, invSets); err != nil {
			return fmt.Errorf("scale set definition %w", err)
		}
		if err := putBatch(tx.Bucket(sessionsBucket), sesIDs, sessions); err != nil {
			return fmt.Errorf("session %w", err)
		}
		rev = cur + 1
		if len(defNames)+len(setNames) > 0 {
			if err := meta.Put(inventoryRevisionKey, putInt(rev)); err != nil {
				return fmt.Errorf("put inventory revision: %w", err)
			}
		}
		return meta.Put(revisionKey, putInt(rev))
	})
	if err != nil {
		return 0, s.wrap("commit", err)
	}
	if len(defNames)+len(c.Events)+len(c.Deletes)+len(incNames)+len(vmRecords)+len(sesIDs)+len(sightIDs) >= releaseAfter {
		releaseMapping(s.db)
	}

	u.Revision = rev - 1
	s.log.Append(&forewarn.Update{Revision: rev, Change: u})
	return rev, nil
}

// releaseAfter is how many keys a commit writes before the store drops
// the pages it read from the process (releaseMapping): a commit of a few
// keys reads a few pages.
const releaseAfter = 100

// putBatch puts the value of each of names, sorted, from b into bucket,
// and deletes the key of each whose value is empty (a removal).
func putBatch(bucket *bbolt.Bucket, names []string, b *codec.Batch) error {
	for i, name := range names {
		v := b.Bytes(i)
		if len(v) == 0 {
			if err := bucket.Delete([]byte(name)); err != nil {
				return fmt.Errorf("%s: delete: %w", name, err)
			}
			continue
		}
		if err := bucket.Put([]byte(name), v); err != nil {
			return fmt.Errorf("%s: put: %w", name, err)
		}
	}
	return nil
}

// loadTx reads the whole state in tx. A bucket the file lacks (one of a
// store written before it existed) reads as empty.
func loadTx(tx *bbolt.Tx) (*forewarn.State, error) {
	st := &forewarn.State{Incarnations: make(map[string]int64), VMs: make(map[string]*forewarn.VMRecord),
		ScaleSets: make(map[string]*forewarn.ScaleSetRecord), Events: []*forewarn.Event{}}
	meta := tx.Bucket(metaBucket)
	st.Revision = getInt(meta.Get(revisionKey))
	st.InventoryRevision = getInt(meta.Get(inventoryRevisionKey))
	var err error
	if st.Inventory, err = loadBucket(tx, inventoryBucket, codec.Definition); err != nil {
		return nil, err
	}
	if st.InventorySets, err = loadBucket(tx, inventorySetsBucket, codec.ScaleSet); err != nil {
		return nil, err
	}
	if st.Sessions, err = loadBucket(tx, sessionsBucket, codec.Session); err != nil {
		return nil, err
	}
	if st.Sightings, err = loadBucket(tx, sightingsBucket, codec.Sighting); err != nil {
		return nil, err
	}
	if st.SigningKeys, err = codec.SigningKeys(meta.Get(signingKeysKey)); err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	if err := forEach(tx, eventsBucket, func(k, v []byte) error {
		e, err := decodeEvent(v)
		if err != nil {
			return fmt.Errorf("event %q: %w", k, err)
		}
		if e.ID != string(k) {
			return fmt.Errorf("event %q is stored under key %q", e.ID, k)
		}
		st.Events = append(st.Events, e)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := forEach(tx, incarnationsBucket, func(k, v []byte) error {
		st.Incarnations[string(k)] = getInt(v)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := forEach(tx, vmsBucket, func(k, v []byte) error {
		r, err := decodeVM(v)
		if err != nil {
			return fmt.Errorf("VM record %q: %w", k, err)
		}
		st.VMs[string(k)] = r
		return nil
	}); err != nil {
		return nil, err
	}
	if err := forEach(tx, scaleSetsBucket, func(k, v []byte) error {
		r := new(forewarn.ScaleSetRecord)
		if err := json.Unmarshal(v, r); err != nil {
			return fmt.Errorf("scale set record %q: %w", k, err)
		}
		st.ScaleSets[string(k)] = r
		return nil
	}); err != nil {
		return nil, err
	}
	return st, nil
}

// forEach calls fn for each key and value of the bucket name, if tx has
// it.
func forEach(tx *bbolt.Tx, name []byte, fn func(k, v []byte) error) error {
	if b := tx.Bucket(name); b != nil {
		return b.ForEach(fn)
	}
	return nil
}

// inParts calls fn on [0, n) cut into one part per CPU, at once, and
// returns the first error; a small n is one part. A fleet-wide event
// encodes 100,000 events in one commit.
func inParts(n int, fn func(lo, hi int) error) error {
	parts := min(runtime.GOMAXPROCS(0), n/1024+1)
	if parts <= 1 {
		return fn(0, n)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { errs[p] = fn(p*n/parts, (p+1)*n/parts) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// loadBucket reads every value of the bucket name, each decoded by
// decode from its key and its JSON; a bucket tx lacks reads as empty.
func loadBucket[T any](tx *bbolt.Tx, name []byte, decode func(key string, v []byte) (*T, error)) (map[string]*T, error) {
	m := make(map[string]*T)
	err := forEach(tx, name, func(k, v []byte) error {
		x, err := decode(string(k), v)
		if err != nil {
			return fmt.Errorf("%s %q: %w", name, k, err)
		}
		m[string(k)] = x
		return nil
	})
	return m, err
}

// Follow returns a channel of every commit after revision since, kept in
// memory since the store opened; a follower that needs an older or a
// forgotten commit is told to reload.
func (s *Store) Follow(ctx context.Context, since int64) <-chan *forewarn.Update {
	return s.log.Follow(ctx, since)
}

// Close closes every watch channel and the file, after any transaction
// in progress. Later calls to Load and Commit return EUNAVAILABLE.
// Calling Close again returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.log.Close()
	s.mu.Unlock()

	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// wrap returns err as is when it already carries a code, EUNAVAILABLE
// when the store closed under the call, and otherwise wraps it with the
// operation and the path.
func (s *Store) wrap(op string, err error) error {
	var e *forewarn.Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return errClosed()
	}
	return fmt.Errorf("%s store %s: %w", op, s.path, err)
}

func errClosed() error { return forewarn.Errorf(forewarn.EUNAVAILABLE, "store is closed") }

func decodeEvent(b []byte) (*forewarn.Event, error) {
	var e forewarn.Event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	return e.Normalized(), nil
}

func decodeVM(b []byte) (*forewarn.VMRecord, error) {
	var r forewarn.VMRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return r.Normalized(), nil
}

func getInt(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

func putInt(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
