package memo

import "testing"

// TestTable checks that a value is made once per key and that the table
// forgets everything once it is full, never holding more than Size.
func TestTable(t *testing.T) {
	var tab Table[int, *int]
	made := 0
	mk := func(i int) func() *int { return func() *int { made++; return &i } }
	a := tab.Get(1, mk(1))
	if b := tab.Get(1, mk(2)); b != a || *b != 1 || made != 1 {
		t.Fatalf("second Get made a new value: %d, made %d", *b, made)
	}
	for i := 2; i <= Size; i++ {
		tab.Get(i, mk(i))
	}
	if len(tab.m) != Size || made != Size {
		t.Fatalf("%d entries, %d made; want %d", len(tab.m), made, Size)
	}
	tab.Get(Size+1, mk(Size+1))
	if len(tab.m) != 1 {
		t.Fatalf("%d entries after the table filled up, want 1", len(tab.m))
	}
	if b := tab.Get(1, mk(1)); b == a || made != Size+2 {
		t.Fatalf("a forgotten key kept its value")
	}
}
