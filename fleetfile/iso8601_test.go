package fleetfile_test

import (
	"testing"
	"time"

	"github.com/forewarn/forewarn/fleetfile"
)

func TestParseISODuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"PT5M", 5 * time.Minute},
		{"PT15M", 15 * time.Minute},
		{"PT300S", 300 * time.Second},
		{"PT900S", 15 * time.Minute},
		{"PT0.5H", 30 * time.Minute},
		{"PT0,25H", 15 * time.Minute},
		{"PT4M59.5S", 5*time.Minute - 500*time.Millisecond},
		{"PT1.000000001S", time.Second + 1},
		{"PT0.0000000019S", 1}, // below a nanosecond is dropped
		{"P1D", 24 * time.Hour},
		{"P0.5D", 12 * time.Hour},
		{"P1DT2H", 26 * time.Hour},
		{"P1DT2H3M4S", 26*time.Hour + 3*time.Minute + 4*time.Second},
		{"PT1H30M", 90 * time.Minute},
		{"PT1H0.5M", time.Hour + 30*time.Second},
		{"PT0S", 0},
		{"P0D", 0},
		{"PT05M", 5 * time.Minute},
		{"PT2562047H47M16.854775807S", time.Duration(1<<63 - 1)},
	} {
		got, err := fleetfile.ParseISODuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseISODuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for in, msg := range map[string]string{
		"":                           "it is empty",
		"P":                          "it has no component",
		"PT":                         "it has no component after T",
		"P1DT":                       "it has no component after T",
		"T5M":                        "it does not start with P",
		"5M":                         "it does not start with P",
		"pt5m":                       "it does not start with P",
		" PT5M":                      "it does not start with P",
		"-PT5M":                      "it has a sign; only positive durations are allowed",
		"+PT5M":                      "it has a sign; only positive durations are allowed",
		"PT-5M":                      "a component has a sign; only positive durations are allowed",
		"P-1D":                       "a component has a sign; only positive durations are allowed",
		"PT5":                        "number 5 has no designator",
		"P1T5M":                      "number 1 has no designator",
		"PTM":                        `designator "M" has no number`,
		"PT5m":                       `designator "m" is unknown; use D, or H, M or S after T`,
		"PT5X":                       `designator "X" is unknown; use D, or H, M or S after T`,
		"PT1W":                       `designator "W" is unknown; use D, or H, M or S after T`,
		"PT5µ":                       `designator "µ" is unknown; use D, or H, M or S after T`,
		"P1Y":                        "designator Y is not supported: years, months and weeks are refused; use D, H, M or S (minutes are M after T)",
		"P5M":                        "designator M is not supported: years, months and weeks are refused; use D, H, M or S (minutes are M after T)",
		"P1W":                        "designator W is not supported: years, months and weeks are refused; use D, H, M or S (minutes are M after T)",
		"P5H":                        "designator H must come after T",
		"P5S":                        "designator S must come after T",
		"PT1D":                       "designator D must come before T",
		"PT5M5M":                     "designator M is repeated",
		"PT1H2M1H":                   "designator H is repeated",
		"P1D1D":                      "designator D is repeated",
		"PT5S5M":                     "designator M comes after S; the order is D, T, H, M, S",
		"PT1M1H":                     "designator H comes after M; the order is D, T, H, M, S",
		"PT1HT1M":                    "T is repeated",
		"PT0.5H30M":                  "only the last component may have a fraction, not 0.5H",
		"P0.5DT1H":                   "only the last component may have a fraction, not 0.5D",
		"PT.5H":                      ".5 is not an integer or decimal number",
		"PT5.M":                      "5. is not an integer or decimal number",
		"PT1.2.3S":                   "1.2.3 is not an integer or decimal number",
		"PT1,5.5S":                   "1,5.5 is not an integer or decimal number",
		"PT2562047H47M16.854775808S": "it is too long",
		"PT99999999999999999999999H": "it is too long",
	} {
		d, err := fleetfile.ParseISODuration(in)
		want := `"` + in + `" is not an ISO 8601 duration: ` + msg
		if err == nil || err.Error() != want || d != 0 {
			t.Errorf("ParseISODuration(%q) = %v, %v\nwant error %s", in, d, err, want)
		}
	}
}
