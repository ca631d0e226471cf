// Package weakmap is a map keyed by pointers that does not keep its keys
// alive: an entry goes away once its key is garbage. The renderers use
// it to share one rendering of an event version between every VM that
// shows it, for exactly as long as that version lives.
package weakmap

import (
	"runtime"
	"sync"
	"weak"
)

// Map maps a *K to a V for as long as the *K is reachable. The zero
// value is empty and ready to use; a Map must not be copied. V must not
// refer to the key, or the entry would keep it alive.
type Map[K, V any] struct {
	mu sync.Mutex
	m  map[weak.Pointer[K]]V
}

// Get returns the value stored for k.
func (m *Map[K, V]) Get(k *K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[weak.Make(k)]
	return v, ok
}

// Put stores v for k, until k is garbage. Put k at most once.
func (m *Map[K, V]) Put(k *K, v V) {
	w := weak.Make(k)
	m.mu.Lock()
	if m.m == nil {
		m.m = map[weak.Pointer[K]]V{}
	}
	m.m[w] = v
	m.mu.Unlock()
	runtime.AddCleanup(k, m.drop, w)
}

func (m *Map[K, V]) drop(w weak.Pointer[K]) {
	m.mu.Lock()
	delete(m.m, w)
	m.mu.Unlock()
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}
