package lnetd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"reflect"
	"testing"
	"time"

	"softib/lnet"
)

// FuzzMapJSON: Map.UnmarshalJSON never panics, and what it accepts
// re-encodes to JSON that decodes to the same document.
func FuzzMapJSON(f *testing.F) {
	ni := Map{}.add("nid", "1.2.3.4@tcp")
	f.Add(JSON(Map{}.add("net", List{Map{}.add("net type", "tcp").add("local NI(s)", List{ni})})))
	f.Add(JSON(statsDoc(lnet.Stats{SendCount: 3, RecvLength: 1 << 20})))
	f.Add([]byte(`{"a":[1,2.5,true,null,"x",{"b":{}}],"c":-9223372036854775808}`))
	f.Add([]byte(`{"a":1e400}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Map
		if err := m.UnmarshalJSON(b); err != nil {
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var m2 Map
		if err := m2.UnmarshalJSON(out); err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip:\n%#v\n%#v", m, m2)
		}
		_ = YAML(m) // rendering any decoded document must not panic
	})
}

// FuzzControlRequest: arbitrary bytes on a control connection never
// crash the server, and each complete line gets exactly one response.
func FuzzControlRequest(f *testing.F) {
	for _, r := range []Request{
		{V: 1, Op: "net.show", Args: json.RawMessage(`{"verbose":true}`)},
		{V: 1, Op: "ping", Args: json.RawMessage(`{"nid":"1.2.3.4@tcp","timeout":5000000000}`)},
		{V: 1, Op: "import", Args: json.RawMessage(`{"config":{"net":[{"net_type":"tcp"}]}}`)},
		{V: 2, Op: "x"},
	} {
		b, _ := json.Marshal(r)
		f.Add(append(b, '\n'))
	}
	f.Add([]byte("{\n}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, c := net.Pipe()
		s := NewServer(func(_ context.Context, op string, args json.RawMessage) (any, *OpError) {
			var v any
			if err := json.Unmarshal(args, &v); err != nil && len(args) > 0 {
				return nil, opErr("manage", op, errnoInval, "%v", err)
			}
			return v, nil
		})
		s.wg.Add(1)
		go s.serveConn(c)
		defer s.Close()
		defer a.Close()
		lines := bytes.Count(b, []byte{'\n'})
		go func() {
			a.Write(b)
		}()
		a.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(a)
		for i := range lines {
			line, err := readLine(r, 1<<24)
			if err != nil {
				t.Fatalf("response %d of %d: %v", i, lines, err)
			}
			var resp Response
			if err := json.Unmarshal(line, &resp); err != nil {
				t.Fatalf("response %q: %v", line, err)
			}
		}
	})
}
