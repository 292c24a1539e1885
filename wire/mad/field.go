package mad

import "fmt"

// Field locates one field of a wire layout. Bit numbering follows the
// IBTA tables: Bit counts from the most significant bit of the byte at
// Byte (0 = MSB), and the field extends Bits bits towards the least
// significant end, across byte boundaries, big-endian.
//
// Integer fields are at most 64 bits wide (with Bit+Bits <= 64); wider
// fields (GIDs, private data, ARI) are byte aligned and read with
// [Field.Bytes].
type Field struct {
	Name string // IBTA field name
	Byte int    // offset of the first byte
	Bit  int    // bit offset inside the first byte, 0 = MSB
	Bits int    // width in bits
}

// End returns the offset one past the last byte the field touches.
func (f Field) End() int { return f.Byte + (f.Bit+f.Bits+7)/8 }

// IsBytes reports whether f is a byte-aligned field accessed as a byte
// slice rather than an integer.
func (f Field) IsBytes() bool { return f.Bits > 64 }

// Get returns the integer value of f in b. It returns 0 when b is too
// short or f is a byte-array field.
func (f Field) Get(b []byte) uint64 {
	if f.IsBytes() || f.End() > len(b) || f.Byte < 0 {
		return 0
	}
	total := f.Bit + f.Bits
	n := (total + 7) / 8
	var v uint64
	for i := range n {
		v = v<<8 | uint64(b[f.Byte+i])
	}
	v >>= uint(n*8 - total)
	return v & f.mask()
}

// Set stores v (truncated to the field width) into b, preserving every
// bit outside the field. It does nothing when b is too short or f is a
// byte-array field.
func (f Field) Set(b []byte, v uint64) {
	if f.IsBytes() || f.End() > len(b) || f.Byte < 0 {
		return
	}
	total := f.Bit + f.Bits
	n := (total + 7) / 8
	shift := uint(n*8 - total)
	m := f.mask() << shift
	v = (v << shift) & m
	var cur uint64
	for i := range n {
		cur = cur<<8 | uint64(b[f.Byte+i])
	}
	cur = cur&^m | v
	for i := n - 1; i >= 0; i-- {
		b[f.Byte+i] = byte(cur)
		cur >>= 8
	}
}

// Bytes returns the bytes of a byte-aligned field (a sub-slice of b, so
// writes through it modify b), or nil when b is too short or the field
// is not byte aligned.
func (f Field) Bytes(b []byte) []byte {
	if f.Bit != 0 || f.Bits%8 != 0 || f.End() > len(b) || f.Byte < 0 {
		return nil
	}
	return b[f.Byte:f.End():f.End()]
}

// Size returns the field size in bytes, rounded up.
func (f Field) Size() int { return (f.Bits + 7) / 8 }

func (f Field) mask() uint64 {
	if f.Bits >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(f.Bits) - 1
}

// setBool stores a one-bit flag.
func (f Field) setBool(b []byte, v bool) {
	if v {
		f.Set(b, 1)
	} else {
		f.Set(b, 0)
	}
}

// bool reads a one-bit flag.
func (f Field) bool(b []byte) bool { return f.Get(b) != 0 }

// putBytes copies src into the byte field of b and zero-fills the rest
// of the field. It reports how many bytes were copied.
func (f Field) putBytes(b, src []byte) int {
	d := f.Bytes(b)
	n := copy(d, src)
	clear(d[n:])
	return n
}

// Layout is the field table of one wire structure.
type Layout struct {
	Name   string  // message name as the IBTA uses it, e.g. "REQ"
	Attr   AttrID  // MAD attribute ID, 0 for non-MAD structures
	Size   int     // size of the structure in bytes
	Fields []Field // fields in wire order
}

// Field returns the named field.
func (l *Layout) Field(name string) (Field, bool) {
	for _, f := range l.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// Get reads the named integer field of b.
func (l *Layout) Get(b []byte, name string) (uint64, error) {
	f, err := l.lookup(b, name)
	if err != nil {
		return 0, err
	}
	if f.IsBytes() {
		return 0, fmt.Errorf("mad: %s.%s is a byte field: %w", l.Name, name, ErrFieldType)
	}
	return f.Get(b), nil
}

// Set writes the named integer field of b, preserving all other bits.
func (l *Layout) Set(b []byte, name string, v uint64) error {
	f, err := l.lookup(b, name)
	if err != nil {
		return err
	}
	if f.IsBytes() {
		return fmt.Errorf("mad: %s.%s is a byte field: %w", l.Name, name, ErrFieldType)
	}
	f.Set(b, v)
	return nil
}

// Bytes returns the named byte field of b.
func (l *Layout) Bytes(b []byte, name string) ([]byte, error) {
	f, err := l.lookup(b, name)
	if err != nil {
		return nil, err
	}
	d := f.Bytes(b)
	if d == nil {
		return nil, fmt.Errorf("mad: %s.%s is not byte aligned: %w", l.Name, name, ErrFieldType)
	}
	return d, nil
}

func (l *Layout) lookup(b []byte, name string) (Field, error) {
	f, ok := l.Field(name)
	if !ok {
		return Field{}, fmt.Errorf("mad: %s has no field %q: %w", l.Name, name, ErrNoField)
	}
	if len(b) < f.End() {
		return Field{}, fmt.Errorf("mad: %s.%s needs %d bytes, have %d: %w", l.Name, name, f.End(), len(b), ErrTooShort)
	}
	return f, nil
}
