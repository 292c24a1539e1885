package selftest

import (
	"reflect"
	"testing"
)

func TestDist(t *testing.T) {
	for _, tc := range []struct {
		dist   string
		nc, ns int
		want   [][]int
	}{
		{"1:1", 4, 2, [][]int{{0}, {1}, {0}, {1}}},
		{"1:1", 2, 3, [][]int{{0}, {1}}},
		{"1:N", 2, 3, [][]int{{0, 1, 2}, {0, 1, 2}}},
		{"N:N", 3, 2, [][]int{{0, 1}, {0, 1}, {0, 1}}},
		{"2:1", 4, 2, [][]int{{0}, {0}, {1}, {1}}},
		{"1:2", 3, 3, [][]int{{0, 1}, {2, 0}, {1, 2}}},
		{"N:1", 3, 2, [][]int{{0}, {0}, {0}}},
		{"1:5", 1, 2, [][]int{{0, 1}}},
		{"1:1", 1, 0, [][]int{nil}},
	} {
		d, err := ParseDist(tc.dist)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Map(tc.nc, tc.ns); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %d clients %d servers: %v, want %v", tc.dist, tc.nc, tc.ns, got, tc.want)
		}
		if d.String() != tc.dist {
			t.Errorf("String %q, want %q", d.String(), tc.dist)
		}
	}
	for _, bad := range []string{"", "1", "0:1", "1:-1", "a:b", "1:1:1"} {
		if _, err := ParseDist(bad); err == nil {
			t.Errorf("ParseDist(%q) accepted", bad)
		}
	}
}

func TestParseTestArgs(t *testing.T) {
	got, err := ParseTestArgs([]string{"brw", "write", "size=1M", "check=full"})
	if err != nil || got.Op != "write" || got.Size != 1<<20 || got.Check != "full" {
		t.Fatalf("%+v %v", got, err)
	}
	got, err = ParseTestArgs([]string{"brw"})
	if err != nil || got.Op != "read" || got.Size != 4096 || got.Check != "none" {
		t.Fatalf("defaults: %+v %v", got, err)
	}
	for _, bad := range [][]string{nil, {"brw", "size=2M"}, {"brw", "check=most"}, {"ping", "x"}, {"foo"}, {"brw", "size=0"}} {
		if _, err := ParseTestArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseNIDs(t *testing.T) {
	got, err := ParseNIDs([]string{"127.0.0.[2-4]@tcp", "10.0.0.[1,3]@o2ib", "127.0.0.2@tcp"})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, n := range got {
		s = append(s, n.String())
	}
	want := []string{"127.0.0.2@tcp", "127.0.0.3@tcp", "127.0.0.4@tcp", "10.0.0.1@o2ib", "10.0.0.3@o2ib"}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("%v, want %v", s, want)
	}
	for _, bad := range []string{"1.2.3.[4-2]@tcp", "1.2.3.[4@tcp", "nonsense"} {
		if _, err := ParseNIDs([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSizes(t *testing.T) {
	for s, want := range map[string]int{"4K": 4096, "4k": 4096, "1M": 1 << 20, "104": 104, "64K": 65536} {
		got, err := ParseSize(s)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", s, got, err)
		}
		if s != "4k" && s != "104" && FormatSize(got) != s {
			t.Errorf("FormatSize(%d) = %q", got, FormatSize(got))
		}
	}
}
