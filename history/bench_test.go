package history_test

import (
	"testing"

	"github.com/forewarn/forewarn/history"
)

// BenchmarkApply100k adds 100,000 VMs to an empty History in one Apply.
func BenchmarkApply100k(b *testing.B) {
	vms := names("vm", 100_000)
	b.ReportAllocs()
	for b.Loop() {
		h := history.New(nil, history.DefaultSize)
		h.Apply(vms, nil)
	}
}
