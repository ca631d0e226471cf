package aws_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/aws"
)

// TestErrorsDoNotEchoHugeValues: EC2's error pages are fixed, so a
// 16 MiB path, token or TTL gets the page of its status and nothing of
// the request back.
func TestErrorsDoNotEchoHugeValues(t *testing.T) {
	_, s := setup(t)
	huge := strings.Repeat("x", 16<<20)
	for _, c := range []struct {
		name string
		r    req
		code int
	}{
		{"path", req{path: "/latest/meta-data/" + huge, remote: optAddr}, http.StatusNotFound},
		{"token", req{path: "/latest/meta-data/instance-id", remote: ec2Addr, header: map[string]string{aws.TokenHeader: huge}}, http.StatusUnauthorized},
		{"TTL", req{method: http.MethodPut, path: aws.TokenPath, remote: ec2Addr, header: map[string]string{aws.TokenTTLHeader: huge}}, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			want(t, c.name, do(s, c.r), c.code, errorPage(c.code))
		})
	}
}
