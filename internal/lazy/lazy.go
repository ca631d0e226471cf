// Package lazy holds values made at their first use, without a lock on
// the uses after it: a GET path reads them with one atomic load.
package lazy

import "sync/atomic"

// Value is a *T made at its first Get. Gets racing to be first may each
// make one; every Get returns the one stored first. The zero Value is
// empty, and its atomic.Pointer is there for Load and Store.
type Value[T any] struct{ atomic.Pointer[T] }

// Get returns v's value, storing what mk makes when v has none yet.
func (v *Value[T]) Get(mk func() *T) *T {
	if x := v.Load(); x != nil {
		return x
	}
	v.CompareAndSwap(nil, mk())
	return v.Load()
}
