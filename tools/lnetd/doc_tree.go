package lnetd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Map is an ordered YAML/JSON mapping: lnetctl prints its keys in a fixed
// order, which a Go map would lose. Values are string, int64, bool, Map,
// List or nil.
type Map []Field

// Field is one key of a Map.
type Field struct {
	Key   string
	Value any
}

// List is a YAML sequence / JSON array.
type List []any

// Get returns the value of key (nil when absent).
func (m Map) Get(key string) any {
	for _, f := range m {
		if f.Key == key {
			return f.Value
		}
	}
	return nil
}

// Path follows keys and list indexes ("net", 1, "local NI(s)", 0, "nid")
// and returns the value there, or nil.
func (m Map) Path(p ...any) any {
	var cur any = m
	for _, k := range p {
		switch c := cur.(type) {
		case Map:
			s, ok := k.(string)
			if !ok {
				return nil
			}
			cur = c.Get(s)
		case List:
			i, ok := k.(int)
			if !ok || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// add appends a field and returns the map, for building documents.
func (m Map) add(key string, v any) Map { return append(m, Field{key, v}) }

// MarshalJSON writes the mapping as a JSON object, keys in order.
func (m Map) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.Key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a JSON object keeping the key order; nested objects
// become Map, arrays List, integers int64.
func (m *Map) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeJSONValue(d)
	if err != nil {
		return err
	}
	mm, ok := v.(Map)
	if !ok {
		return fmt.Errorf("lnetd: JSON document is %T, want an object", v)
	}
	*m = mm
	return nil
}

func decodeJSONValue(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := Map{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("lnetd: JSON key %v", kt)
				}
				v, err := decodeJSONValue(d)
				if err != nil {
					return nil, err
				}
				m = append(m, Field{k, v})
			}
			_, err = d.Token()
			return m, err
		case '[':
			l := List{}
			for d.More() {
				v, err := decodeJSONValue(d)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err = d.Token()
			return l, err
		}
		return nil, fmt.Errorf("lnetd: unexpected JSON %v", t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		return t.String(), nil
	default:
		return t, nil // string, bool, nil
	}
}

// JSON renders doc as indented JSON.
func JSON(doc Map) []byte {
	b, err := json.MarshalIndent(doc, "", "    ")
	if err != nil {
		// Only Map, List and scalars are ever put in a document.
		return []byte(fmt.Sprintf("{\"error\": %q}\n", err.Error()))
	}
	return append(b, '\n')
}

// YAML renders doc the way lnetctl prints it: mappings indented by 4,
// top-level sequences by 4 and nested ones by 2 ("- " items), booleans as
// True/False, empty sections as a bare "key:".
func YAML(doc Map) []byte {
	var b bytes.Buffer
	emitMap(&b, doc, 0, false)
	return b.Bytes()
}

// emitMap writes m's fields at indent; with first, the first field
// continues a "- " already written.
func emitMap(b *bytes.Buffer, m Map, indent int, first bool) {
	for i, f := range m {
		if !(first && i == 0) {
			b.WriteString(strings.Repeat(" ", indent))
		}
		b.WriteString(f.Key)
		b.WriteByte(':')
		emitValue(b, f.Value, indent)
	}
}

// emitValue writes the value of a key at indent, starting right after
// the colon.
func emitValue(b *bytes.Buffer, v any, indent int) {
	switch x := v.(type) {
	case Map:
		b.WriteByte('\n')
		emitMap(b, x, indent+4, false)
	case List:
		b.WriteByte('\n')
		li := indent + 2
		if indent == 0 {
			li = 4
		}
		for _, e := range x {
			b.WriteString(strings.Repeat(" ", li))
			b.WriteString("- ")
			if m, ok := e.(Map); ok && len(m) > 0 {
				emitMap(b, m, li+2, true)
				continue
			}
			b.WriteString(scalarText(e))
			b.WriteByte('\n')
		}
	case nil:
		b.WriteByte('\n')
	default:
		b.WriteByte(' ')
		b.WriteString(scalarText(x))
		b.WriteByte('\n')
	}
}

// scalarText formats a scalar, quoting strings that would read back as
// something else.
func scalarText(v any) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		if needsQuotes(x) {
			return strconv.Quote(x)
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case Map, List:
		return "{}" // an empty collection inside a list
	case nil:
		return "~"
	}
	return fmt.Sprint(v)
}

// needsQuotes reports whether a string would read back as something else
// (a number, a bool, a flow sequence like "[0]").
func needsQuotes(s string) bool {
	if s == "" || strings.ContainsAny(s[:1], "[]{}&*!|>'\"%@`#,") {
		return true
	}
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return true
	}
	_, isStr := v.(string)
	return !isStr
}
