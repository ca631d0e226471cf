package cow

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

func addrHash(a netip.Addr) uint64 {
	b := a.As16()
	var h uint64 = 14695981039346656037
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h ^ h>>32
}

// TestApply checks sets, replacements and deletes, in order, and Len.
func TestApply(t *testing.T) {
	m := New[string, int](String)
	if _, ok := m.Load("a"); ok || m.Len() != 0 {
		t.Fatal("empty map has a key")
	}
	var es []Entry[string, int]
	for i := range 1000 {
		es = append(es, Entry[string, int]{Key: fmt.Sprint(i), Value: i})
	}
	m.Apply(es)
	if m.Len() != 1000 {
		t.Fatalf("Len %d, want 1000", m.Len())
	}
	m.Apply([]Entry[string, int]{{Key: "7", Value: 70}, {Key: "8", Delete: true}, {Key: "8", Value: 80}, {Key: "9", Delete: true}, {Key: "x", Delete: true}})
	for k, want := range map[string]int{"7": 70, "8": 80, "10": 10} {
		if v, ok := m.Load(k); !ok || v != want {
			t.Errorf("Load(%s) = %d, %v; want %d", k, v, ok, want)
		}
	}
	if _, ok := m.Load("9"); ok || m.Len() != 999 {
		t.Errorf("9 still there, or Len %d != 999", m.Len())
	}
	n := 0
	m.Range(func(string, int) bool { n++; return true })
	if n != 999 {
		t.Errorf("Range saw %d keys, want 999", n)
	}
}

// TestOldShardsStayWhole checks that a write never changes a version a
// reader already holds: writes copy.
func TestOldShardsStayWhole(t *testing.T) {
	m := New[string, int](String)
	m.Apply([]Entry[string, int]{{Key: "a", Value: 1}, {Key: "b", Value: 2}})
	held := m.Clone()
	m.Store("a", 2)
	m.Delete("b")
	if v, _ := held.Load("a"); v != 1 {
		t.Fatal("a write changed a version in place")
	}
	if _, ok := held.Load("b"); !ok || held.Len() != 2 {
		t.Fatalf("a delete changed a version in place: Len %d", held.Len())
	}
	if v, _ := m.Load("a"); v != 2 {
		t.Fatalf("Load after Store = %d", v)
	}
}

// TestOneShard puts many keys in one shard, with colliding hashes, and
// checks that sets, replaces and deletes keep it sorted and whole.
func TestOneShard(t *testing.T) {
	hash := func(k int) uint64 { return uint64(k%7) * Shards } // 7 hashes, all in shard 0
	m := New[int, int](hash)
	var es []Entry[int, int]
	for k := range 300 {
		es = append(es, Entry[int, int]{Key: k, Value: k})
	}
	m.Apply(es)
	for k := 0; k < 300; k += 3 {
		m.Delete(k)
	}
	m.Apply([]Entry[int, int]{{Key: 1, Value: -1}, {Key: 1, Delete: true}, {Key: 1, Value: 100}, {Key: 400, Value: 400}})
	want := map[int]int{400: 400}
	for k := range 300 {
		if k%3 != 0 {
			want[k] = k
		}
	}
	want[1] = 100
	if m.Len() != len(want) {
		t.Fatalf("Len %d, want %d", m.Len(), len(want))
	}
	for k := range 401 {
		v, ok := m.Load(k)
		if w, in := want[k]; ok != in || v != w {
			t.Fatalf("Load(%d) = %d, %v; want %d, %v", k, v, ok, w, in)
		}
	}
	got := map[int]int{}
	m.Range(func(k, v int) bool { got[k] = v; return true })
	if len(got) != len(want) {
		t.Fatalf("Range saw %d keys, want %d", len(got), len(want))
	}
}

// TestCloneIsCheap checks that a clone costs one small allocation, not
// a copy of the map.
func TestCloneIsCheap(t *testing.T) {
	m := New[string, int](String)
	es := make([]Entry[string, int], 10000)
	for i := range es {
		es[i] = Entry[string, int]{Key: fmt.Sprint("vm_", i), Value: i}
	}
	m.Apply(es)
	if n := testing.AllocsPerRun(100, func() { m.Clone() }); n != 1 {
		t.Fatalf("Clone allocates %v times, want 1", n)
	}
}

// TestConcurrent reads while writing, for the race detector.
func TestConcurrent(t *testing.T) {
	m := New[netip.Addr, int](addrHash)
	base := netip.MustParseAddr("198.18.0.0")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a := base
		for i := range 2000 {
			m.Store(a, i)
			a = a.Next()
		}
	}()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				m.Load(base)
			}
		}()
	}
	wg.Wait()
	if v, ok := m.Load(base); !ok || v != 0 || m.Len() != 2000 {
		t.Fatalf("Load(base) = %d, %v; Len %d", v, ok, m.Len())
	}
}

// TestLoadDoesNotAllocate pins the read path at zero allocations.
func TestLoadDoesNotAllocate(t *testing.T) {
	m := New[string, *int](String)
	v := 1
	m.Store("web_0", &v)
	name := "web_0"
	if n := testing.AllocsPerRun(100, func() { m.Load(name) }); n != 0 {
		t.Fatalf("Load allocates %v times", n)
	}
}

func BenchmarkStoreOne(b *testing.B) {
	benchmarkStoreOne(b, false)
}

// BenchmarkCloneStoreOne is an inventory change's pattern: a clone, then
// one write to it.
func BenchmarkCloneStoreOne(b *testing.B) {
	benchmarkStoreOne(b, true)
}

func benchmarkStoreOne(b *testing.B, clone bool) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := New[string, int](String)
			es := make([]Entry[string, int], n)
			for i := range es {
				es[i] = Entry[string, int]{Key: fmt.Sprint("vm_", i), Value: i}
			}
			m.Apply(es)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if clone {
					m = m.Clone()
				}
				m.Store("vm_1", i)
			}
		})
	}
}

// TestClone checks that a clone and its original go their own ways.
func TestClone(t *testing.T) {
	m := New[string, int](String)
	m.Apply([]Entry[string, int]{{Key: "a", Value: 1}, {Key: "b", Value: 2}})
	c := m.Clone()
	c.Store("a", 10)
	c.Delete("b")
	m.Store("c", 3)
	if v, _ := m.Load("a"); v != 1 {
		t.Errorf("the original's a = %d after the clone's write", v)
	}
	if _, ok := m.Load("b"); !ok || m.Len() != 3 {
		t.Errorf("the original lost b, or Len %d != 3", m.Len())
	}
	if _, ok := c.Load("c"); ok || c.Len() != 1 {
		t.Errorf("the clone got c, or Len %d != 1", c.Len())
	}
}
