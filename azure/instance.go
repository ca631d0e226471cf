package azure

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/query"
)

// instanceVersions are the api-versions the instance endpoint accepts,
// oldest first, as the real service lists them under /metadata/versions.
var instanceVersions = []string{
	"2017-03-01", "2017-04-02", "2017-08-01", "2017-10-01", "2017-12-01",
	"2018-02-01", "2018-04-02", "2018-10-01", "2019-02-01", "2019-03-11",
	"2019-04-30", "2019-06-01", "2019-06-04", "2019-08-01", "2019-08-15",
	"2019-11-01", "2020-06-01", "2020-07-15", "2020-09-01", "2020-10-01",
	"2020-12-01", "2021-01-01", "2021-02-01", "2021-03-01", "2021-05-01",
	"2021-08-01", "2021-10-01", "2021-11-01", "2021-11-15", "2021-12-13",
	"2022-02-01", "2022-03-01", "2022-07-01", "2022-08-01", "2022-09-01",
	"2023-07-01",
}

// instanceDoc builds the instance metadata tree of vm. Every primitive is
// a string, as in real responses.
func instanceDoc(vm *forewarn.VM) map[string]any {
	sum := sha256.Sum256([]byte("forewarn-vm:" + vm.Name))
	vmID := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	ip := ""
	if vm.IP.IsValid() {
		ip = vm.IP.String()
	}
	return map[string]any{
		"compute": map[string]any{
			"azEnvironment":        "AzurePublicCloud",
			"location":             "forewarn",
			"name":                 vm.Name,
			"osType":               "Linux",
			"platformFaultDomain":  "0",
			"platformUpdateDomain": strconv.Itoa(vm.UpdateDomain),
			"provider":             "Microsoft.Compute",
			"resourceGroupName":    "forewarn",
			"resourceId":           "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/forewarn/providers/Microsoft.Compute/virtualMachines/" + vm.Name,
			"subscriptionId":       "00000000-0000-0000-0000-000000000000",
			"vmId":                 vmID,
			"vmScaleSetName":       "",
			"zone":                 "",
		},
		"network": map[string]any{
			"interface": []any{
				map[string]any{
					"ipv4": map[string]any{
						"ipAddress": []any{map[string]any{"privateIpAddress": ip, "publicIpAddress": ""}},
						"subnet":    []any{},
					},
					"ipv6":       map[string]any{"ipAddress": []any{}},
					"macAddress": "",
				},
			},
		},
	}
}

// handleInstance serves /metadata/instance and any node below it:
// JSON by default, format=text for leaves (bare value, no newline) and
// for directories (one child name a line).
func (s *Server) handleInstance(w http.ResponseWriter, r *http.Request, vm *forewarn.VM) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, msgMethod)
		return
	}
	vm, _ = s.caller(w, r, vm)
	if vm == nil {
		return
	}
	var buf [8]query.Param
	q, ok := parseQuery(w, r, buf[:0])
	if !ok {
		return
	}
	if !slices.Contains(instanceVersions, q.Get("api-version")) {
		writeBadVersion(w, instanceVersions)
		return
	}
	format := q.Get("format")
	if format != "" && format != "json" && format != "text" {
		writeError(w, http.StatusBadRequest, msgBadFormat)
		return
	}
	var node any = instanceDoc(vm)
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, "/metadata/instance"), "/")
	if rest != "" {
		for _, part := range strings.Split(rest, "/") {
			switch n := node.(type) {
			case map[string]any:
				node, ok = n[part]
			case []any:
				i, err := strconv.Atoi(part)
				ok = err == nil && i >= 0 && i < len(n)
				if ok {
					node = n[i]
				}
			default:
				ok = false
			}
			if !ok {
				writeError(w, http.StatusNotFound, msgNotFound)
				return
			}
		}
	}
	switch n := node.(type) {
	case string:
		if format != "text" {
			writeError(w, http.StatusBadRequest, msgLeafFormat)
			return
		}
		w.Header()["Content-Type"] = hdrText
		_, _ = w.Write([]byte(n))
		return
	case map[string]any:
		if format == "text" {
			var b strings.Builder
			for _, k := range slices.Sorted(maps.Keys(n)) {
				b.WriteString(k)
				if _, leaf := n[k].(string); !leaf {
					b.WriteByte('/')
				}
				b.WriteByte('\n')
			}
			w.Header()["Content-Type"] = hdrText
			_, _ = w.Write([]byte(b.String()))
			return
		}
	case []any:
		if format == "text" {
			var b strings.Builder
			for i := range n {
				fmt.Fprintf(&b, "%d/\n", i)
			}
			w.Header()["Content-Type"] = hdrText
			_, _ = w.Write([]byte(b.String()))
			return
		}
	}
	writeJSON(w, http.StatusOK, mustJSON(node))
}

// handleVersions serves /metadata/versions, which needs no api-version.
func (s *Server) handleVersions(w http.ResponseWriter, r *http.Request, vm *forewarn.VM) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, msgMethod)
		return
	}
	if vm, _ := s.caller(w, r, vm); vm == nil {
		return
	}
	var buf [8]query.Param
	if _, ok := parseQuery(w, r, buf[:0]); !ok {
		return
	}
	writeJSON(w, http.StatusOK, mustJSON(map[string][]string{"apiVersions": instanceVersions}))
}
