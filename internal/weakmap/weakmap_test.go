package weakmap

import (
	"runtime"
	"testing"
	"time"
)

type key struct{ n [64]byte }

// TestEntriesGoWithTheirKeys checks that a value is found while its key
// lives and that its entry is dropped once the key is garbage.
func TestEntriesGoWithTheirKeys(t *testing.T) {
	var m Map[key, int]
	keep := &key{}
	m.Put(keep, 1)
	for i := range 100 {
		m.Put(&key{}, i)
	}
	if v, ok := m.Get(keep); !ok || v != 1 {
		t.Fatalf("Get = %d, %v; want 1, true", v, ok)
	}
	if _, ok := m.Get(&key{}); ok {
		t.Fatalf("found a key never put")
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.Len() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left, want 1", m.Len())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if v, ok := m.Get(keep); !ok || v != 1 {
		t.Fatalf("the live key's entry is gone")
	}
	runtime.KeepAlive(keep)
}
