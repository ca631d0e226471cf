package echo_test

import (
	"strings"
	"testing"

	"github.com/forewarn/forewarn/internal/echo"
)

func TestClip(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"short", "short"},
		{strings.Repeat("a", echo.Max), strings.Repeat("a", echo.Max)},
		{strings.Repeat("a", echo.Max+1), strings.Repeat("a", echo.Max) + "…"},
		// A three-byte character across the cut is left out whole.
		{strings.Repeat("a", echo.Max-1) + "€x", strings.Repeat("a", echo.Max-1) + "…"},
	} {
		if got := echo.Clip(c.in); got != c.want {
			t.Errorf("Clip(%.20q…) = %q, want %q", c.in, got, c.want)
		}
	}
}
