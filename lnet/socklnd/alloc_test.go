package socklnd

import (
	"testing"

	"softib/lnet/lnd"
)

// TestDataPathAllocs: a steady-state send → receive round trip through
// two drivers allocates nothing in socklnd (tx descriptors, header
// buffers, iovecs and receive state are pooled or owned by the conn).
func TestDataPathAllocs(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts are meaningless under -race or -cover")
	}
	for _, tc := range []struct {
		name string
		size int
		cfg  func(*Config)
	}{
		{"0B", 0, func(*Config) {}},
		{"4KiB", 4096, func(*Config) {}},
		{"4KiB-csum", 4096, func(c *Config) { c.EnableCsum = true }},
		{"1MiB-zc", 1 << 20, func(*Config) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ips := testIPs(2)
			cfg := baseConfig()
			tc.cfg(&cfg)
			a := startNode(t, ips[0], cfg)
			b := startNode(t, ips[1], cfg)
			rbuf := make([]byte, tc.size)
			b.host.preMsg = &lnd.Msg{}
			b.host.preBuf = [][]byte{rbuf}
			m := putMsg(a.nid, b.nid, pattern(tc.size, 1), 1)
			round := func() {
				if err := a.d.Send(m); err != nil {
					t.Fatal(err)
				}
				if f := <-a.host.fins; f.status != nil {
					t.Fatal(f.status)
				}
				if f := <-b.host.fins; f.status != nil {
					t.Fatal(f.status)
				}
			}
			for range 20 {
				round() // connect and warm up pools and maps
			}
			if n := testing.AllocsPerRun(200, round); n > 0 {
				t.Fatalf("%v allocs per round trip, want 0", n)
			}
		})
	}
}
