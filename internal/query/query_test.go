package query

import (
	"net/url"
	"reflect"
	"testing"
)

func TestParseMatchesNetURL(t *testing.T) {
	for _, raw := range []string{
		"", "a=1", "a=1&b=2", "a=1&&b=2&", "api-version=2020-07-01&format=text", "k", "k=", "=v",
		"a=%20x+y&b=%2F", "a=1&a=2", "last_etag=abc%3D%3D",
	} {
		var buf [8]Param
		ps, err := Parse(raw, buf[:0])
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		want, _ := url.ParseQuery(raw)
		got := url.Values{}
		for _, p := range ps {
			got[p.Key] = append(got[p.Key], p.Value)
		}
		if len(want) == 0 && len(got) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %v, want %v", raw, got, want)
		}
	}
	for _, raw := range []string{"a=%zz", "a;b=1", "%=1"} {
		var buf [8]Param
		if _, err := Parse(raw, buf[:0]); err != ErrMalformed {
			t.Errorf("%q: %v, want ErrMalformed", raw, err)
		}
	}
}

func TestHelpers(t *testing.T) {
	var buf [8]Param
	ps, _ := Parse("a=1&b=2&a=3", buf[:0])
	if v, ok := Get(ps, "a"); !ok || v != "1" {
		t.Fatalf("Get a = %q %v", v, ok)
	}
	if _, ok := Get(ps, "c"); ok {
		t.Fatal("Get c found")
	}
	if Repeated(ps) != "a" {
		t.Fatalf("Repeated = %q", Repeated(ps))
	}
	ps, _ = Parse("a=1&b=2", buf[:0])
	if Repeated(ps) != "" {
		t.Fatal("no repeat expected")
	}
}

func TestParseDoesNotAllocate(t *testing.T) {
	n := testing.AllocsPerRun(100, func() {
		var buf [8]Param
		ps, _ := Parse("api-version=2020-07-01&format=text", buf[:0])
		if len(ps) != 2 {
			panic("parse")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}
