// Package memo is a bounded memo table: the renderers keep what they
// rendered recently in one, so that one change seen by many VMs is
// rendered once and their documents share memory.
package memo

// Size is how many entries a Table holds before it forgets them all.
const Size = 4096

// Table maps keys to values made on first use. Once it holds Size
// entries it starts again empty, so it never holds more. The zero value
// is ready to use; a Table is not safe for concurrent use.
type Table[K comparable, V any] struct {
	m map[K]V
}

// Get returns the value of k, made by mk when k has none.
func (t *Table[K, V]) Get(k K, mk func() V) V {
	if v, ok := t.m[k]; ok {
		return v
	}
	if t.m == nil || len(t.m) >= Size {
		t.m = make(map[K]V)
	}
	v := mk()
	t.m[k] = v
	return v
}
