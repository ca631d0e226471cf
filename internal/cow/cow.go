// Package cow is a map for many readers and few writers, such as the
// fleet's VMs by name or by address, which every metadata request reads
// and only inventory changes write. A read loads one immutable shard
// without a lock; a write copies the shards it changes and swaps them in,
// so a change of one key costs a shard (the map's size over Shards), not
// the map.
package cow

import (
	"sync"
	"sync/atomic"
)

// Shards is how many shards a Map splits its keys into.
const Shards = 4096

// Map maps K to V. Reads are safe at any time, concurrently with one
// another and with writes; writes are serialized. A reader sees each
// shard either before or after a write, never in between; a write of
// several keys is not atomic across shards. Build it with New.
type Map[K comparable, V any] struct {
	hash   func(K) uint64
	mu     sync.Mutex // serializes writers
	shards [Shards]atomic.Pointer[map[K]V]
	n      atomic.Int64
}

// New returns an empty Map that places a key by hash(key) mod Shards.
// hash must not allocate, for reads not to.
func New[K comparable, V any](hash func(K) uint64) *Map[K, V] {
	return &Map[K, V]{hash: hash}
}

// Clone returns a map that holds what m holds now and that later writes
// to either do not change: they share shards until one copies them. It
// costs Shards pointer copies. It must not race with writes to m.
func (m *Map[K, V]) Clone() *Map[K, V] {
	c := &Map[K, V]{hash: m.hash}
	for i := range m.shards {
		c.shards[i].Store(m.shards[i].Load())
	}
	c.n.Store(m.n.Load())
	return c
}

// Load returns the value of k and whether k is in the map.
func (m *Map[K, V]) Load(k K) (V, bool) {
	if p := m.shards[m.hash(k)%Shards].Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// Len returns how many keys the map holds.
func (m *Map[K, V]) Len() int { return int(m.n.Load()) }

// Entry is one write of Apply: k is set to V, or removed when Delete.
type Entry[K comparable, V any] struct {
	Key    K
	Value  V
	Delete bool
}

// Apply makes the writes es, in order (a later write of a key wins),
// copying each shard they touch once.
func (m *Map[K, V]) Apply(es []Entry[K, V]) {
	if len(es) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Each shard's new map is made once, at its size: a write of many
	// keys does not grow maps step by step.
	idx := make([]uint32, len(es))
	var adds [Shards]int32
	for j, e := range es {
		i := uint32(m.hash(e.Key) % Shards)
		idx[j] = i
		if !e.Delete {
			adds[i]++
		}
	}
	var fresh [Shards]map[K]V
	for j, e := range es {
		i := idx[j]
		s := fresh[i]
		if s == nil {
			old := m.shards[i].Load()
			n := 0
			if old != nil {
				n = len(*old)
			}
			s = make(map[K]V, n+int(adds[i]))
			if old != nil {
				for k, v := range *old {
					s[k] = v
				}
			}
			fresh[i] = s
		}
		if e.Delete {
			delete(s, e.Key)
		} else {
			s[e.Key] = e.Value
		}
	}
	n := m.n.Load()
	for j := range es {
		i := idx[j]
		s := fresh[i]
		if s == nil {
			continue // stored already
		}
		if old := m.shards[i].Load(); old != nil {
			n -= int64(len(*old))
		}
		n += int64(len(s))
		m.shards[i].Store(&s)
		fresh[i] = nil
	}
	m.n.Store(n)
}

// Store sets k to v.
func (m *Map[K, V]) Store(k K, v V) { m.Apply([]Entry[K, V]{{Key: k, Value: v}}) }

// Delete removes k.
func (m *Map[K, V]) Delete(k K) { m.Apply([]Entry[K, V]{{Key: k, Delete: true}}) }

// Range calls f for each key and value until f returns false, shard by
// shard, each shard as of when Range reaches it.
func (m *Map[K, V]) Range(f func(K, V) bool) {
	for i := range m.shards {
		p := m.shards[i].Load()
		if p == nil {
			continue
		}
		for k, v := range *p {
			if !f(k, v) {
				return
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
