package report_test

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/report"
)

// TestReportNetwork: a VM's report names its network and its host when
// it has them, and the stream writes the same; a VM of none has no
// network or host key.
func TestReportNetwork(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.2")
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "flat", Provider: forewarn.Azure, IP: a},
		{Name: "blue", Provider: forewarn.Azure, IP: a, Network: "blue", Host: "hv-01"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	h := history.New(nil, 4)
	h.Follow(eng)
	now := time.Now()
	rep, err := report.Build(eng, h, now, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.VMs) != 2 || rep.VMs[0].Network != "" || rep.VMs[0].Host != "" || rep.VMs[1].Network != "blue" || rep.VMs[1].Host != "hv-01" {
		t.Fatalf("VMs %+v, want flat of no network or host and blue of network blue and host hv-01", rep.VMs)
	}
	var built bytes.Buffer
	if err := json.NewEncoder(&built).Encode(rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(built.String(), `{"name":"flat","provider":"azure",`) || !strings.Contains(built.String(), `{"name":"blue","network":"blue","host":"hv-01","provider":"azure",`) {
		t.Errorf("report JSON:\n%s", built.String())
	}
	st, err := report.Start(eng, h, now, "")
	if err != nil {
		t.Fatal(err)
	}
	var streamed bytes.Buffer
	if _, err := st.WriteTo(&streamed); err != nil || streamed.String() != built.String() {
		t.Errorf("the stream (%v) differs from the report:\n%s\n%s", err, streamed.String(), built.String())
	}
}
