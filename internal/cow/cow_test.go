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

// TestOldShardsStayWhole checks that a write never changes a shard a
// reader already holds: writes copy.
func TestOldShardsStayWhole(t *testing.T) {
	m := New[string, int](String)
	m.Store("a", 1)
	held := m.shards[String("a")%Shards].Load()
	m.Store("a", 2)
	if (*held)["a"] != 1 {
		t.Fatal("a write changed a shard in place")
	}
	if v, _ := m.Load("a"); v != 2 {
		t.Fatalf("Load after Store = %d", v)
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
