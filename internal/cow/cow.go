// Package cow is a map for many readers and few writers, such as the
// fleet's VMs by name or by address, which every metadata request reads
// and only inventory changes write. A read loads one immutable root
// without a lock and finds its key in a sorted shard; a write copies the
// root, the blocks and the shards it changes and swaps the new root in.
// A change of one key costs a root and a block of pointers (about 1 KB)
// and one shard (the map's size over Shards), not the map, and a Clone
// costs nothing: the two share everything until one of them writes.
package cow

import (
	"sync"
	"sync/atomic"
)

// Shards is how many shards a Map splits its keys into: fan blocks of
// fan shards each.
const (
	Shards = fan * fan
	fan    = 64
)

// entry is one key and its value, with the key's hash.
type entry[K comparable, V any] struct {
	h uint64
	k K
	v V
}

// block holds fan shards, each sorted by hash; a nil shard is empty.
type block[K comparable, V any] [fan]*[]entry[K, V]

// root is one immutable version of a map: a nil block is empty.
type root[K comparable, V any] struct {
	b [fan]*block[K, V]
	n int
}

// Map maps K to V. Reads are safe at any time, concurrently with one
// another and with writes; writes are serialized. A reader sees each
// write whole or not at all: a write of several keys swaps one root.
// Build it with New.
type Map[K comparable, V any] struct {
	hash func(K) uint64
	mu   sync.Mutex // serializes writers
	root atomic.Pointer[root[K, V]]
}

// New returns an empty Map that places a key by hash(key) mod Shards.
// hash must not allocate, for reads not to.
func New[K comparable, V any](hash func(K) uint64) *Map[K, V] {
	m := &Map[K, V]{hash: hash}
	m.root.Store(&root[K, V]{})
	return m
}

// Clone returns a map that holds what m holds now and that later writes
// to either do not change: they share the one immutable version until
// one of them writes. It costs one allocation, whatever m holds.
func (m *Map[K, V]) Clone() *Map[K, V] {
	c := &Map[K, V]{hash: m.hash}
	c.root.Store(m.root.Load())
	return c
}

// search returns the index in s of the first entry of hash h or above.
func search[K comparable, V any](s []entry[K, V], h uint64) int {
	lo, hi := 0, len(s)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s[mid].h < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Load returns the value of k. It takes no lock and does not allocate.
func (m *Map[K, V]) Load(k K) (V, bool) {
	h := m.hash(k)
	i := h % Shards
	if b := m.root.Load().b[i/fan]; b != nil {
		if p := b[i%fan]; p != nil {
			s := *p
			for j := search(s, h); j < len(s) && s[j].h == h; j++ {
				if s[j].k == k {
					return s[j].v, true
				}
			}
		}
	}
	var zero V
	return zero, false
}

// Len returns how many keys m holds.
func (m *Map[K, V]) Len() int { return m.root.Load().n }

// Entry is one write of Apply: Key set to Value, or deleted.
type Entry[K comparable, V any] struct {
	Key    K
	Value  V
	Delete bool
}

// Apply writes es in order (a later entry of the same key wins) as one
// new version: a reader sees all of them or none. It copies each block
// and shard it writes to once, so its cost is linear in len(es) and in
// the sizes of the shards they touch.
func (m *Map[K, V]) Apply(es []Entry[K, V]) {
	if len(es) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.root.Load()
	next := new(root[K, V])
	*next = *old
	var counts []int32 // entries per shard, to size big writes' copies once
	if len(es) >= 256 {
		counts = make([]int32, Shards)
		for _, e := range es {
			counts[m.hash(e.Key)%Shards]++
		}
	}
	var freshBlock uint64         // the blocks copied, by bit
	var fresh [Shards / 64]uint64 // the shards copied, by bit
	for _, e := range es {
		h := m.hash(e.Key)
		i := h % Shards
		bi, si := i/fan, i%fan
		b := next.b[bi]
		if freshBlock&(1<<bi) == 0 {
			nb := new(block[K, V])
			if b != nil {
				*nb = *b
			}
			next.b[bi], b = nb, nb
			freshBlock |= 1 << bi
		}
		if fresh[i/64]&(1<<(i%64)) == 0 {
			var olds []entry[K, V]
			if b[si] != nil {
				olds = *b[si]
			}
			extra := 1
			if counts != nil {
				extra = int(counts[i])
			}
			s := make([]entry[K, V], len(olds), len(olds)+extra)
			copy(s, olds)
			b[si] = &s
			fresh[i/64] |= 1 << (i % 64)
		}
		p := b[si]
		s := *p
		j := search(s, h)
		for ; j < len(s) && s[j].h == h; j++ {
			if s[j].k == e.Key {
				break
			}
		}
		switch found := j < len(s) && s[j].h == h; {
		case found && e.Delete:
			s = append(s[:j], s[j+1:]...)
			clear(s[len(s):cap(s)][:1]) // drop what the moved-over slot held
			next.n--
		case found:
			s[j].v = e.Value
		case !e.Delete:
			s = append(s, entry[K, V]{})
			copy(s[j+1:], s[j:])
			s[j] = entry[K, V]{h: h, k: e.Key, v: e.Value}
			next.n++
		}
		*p = s
	}
	m.root.Store(next)
}

// Store sets k to v.
func (m *Map[K, V]) Store(k K, v V) { m.Apply([]Entry[K, V]{{Key: k, Value: v}}) }

// Delete removes k.
func (m *Map[K, V]) Delete(k K) { m.Apply([]Entry[K, V]{{Key: k, Delete: true}}) }

// Range calls f with each key and value of one version of m, in no
// particular order, until f returns false.
func (m *Map[K, V]) Range(f func(K, V) bool) {
	r := m.root.Load()
	for _, b := range r.b {
		if b == nil {
			continue
		}
		for _, p := range b {
			if p == nil {
				continue
			}
			for _, e := range *p {
				if !f(e.k, e.v) {
					return
				}
			}
		}
	}
}

// String hashes a string key (FNV-1a), without allocating.
func String(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h ^ h>>32
}
