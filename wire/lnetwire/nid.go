package lnetwire

import (
	"strconv"
	"strings"
)

// LNDType is an LNet network driver type number (nidstr.h; lnet-wire.md §2.2).
type LNDType uint16

// LND type numbers. The retired ones (1 qsw, 3 gm, 4 ptl, 6 cib, 7 openib,
// 8 iib, 10 ra, 11 vib, 12 mx) have no name here and print as <type:num>.
const (
	SOCKLND  LNDType = 2  // tcp
	O2IBLND  LNDType = 5  // o2ib
	LOLND    LNDType = 9  // lo
	GNILND   LNDType = 13 // gni
	GNIIPLND LNDType = 14 // gip
	PTL4LND  LNDType = 15 // ptlf
	KFILND   LNDType = 16 // kfi
	TOFULND  LNDType = 17 // no string form
	EFALND   LNDType = 18 // efa
	BXI3LND  LNDType = 19 // bxi3f
)

// addrFormat says how an LND prints and parses the address part of a NID.
type addrFormat uint8

const (
	addrDec addrFormat = iota // decimal number
	addrIP                    // IPv4 dotted quad
	addrLo                    // only 0
)

// lndInfo is one row of the LND name table.
type lndInfo struct {
	typ  LNDType
	name string
	addr addrFormat
}

// lndTable lists the LNDs with a string form (nidstrings.c).
var lndTable = [...]lndInfo{
	{SOCKLND, "tcp", addrIP},
	{O2IBLND, "o2ib", addrIP},
	{LOLND, "lo", addrLo},
	{GNILND, "gni", addrDec},
	{GNIIPLND, "gip", addrIP},
	{PTL4LND, "ptlf", addrDec},
	{KFILND, "kfi", addrDec},
	{EFALND, "efa", addrIP},
	{BXI3LND, "bxi3f", addrDec},
}

func lookupType(t LNDType) (lndInfo, bool) {
	for _, e := range lndTable {
		if e.typ == t {
			return e, true
		}
	}
	return lndInfo{}, false
}

// String returns the LND's name ("tcp", "o2ib", "lo"), or "<N>" for a type
// without a string form.
func (t LNDType) String() string {
	if e, ok := lookupType(t); ok {
		return e.name
	}
	return "<" + strconv.Itoa(int(t)) + ">"
}

// ParseLNDType returns the type named s ("tcp", "o2ib", ...).
func ParseLNDType(s string) (LNDType, bool) {
	for _, e := range lndTable {
		if e.name == s {
			return e.typ, true
		}
	}
	return 0, false
}

// Net is an LNet network number: LND type in the upper 16 bits, network
// number in the lower 16 (lnet-wire.md §2.1).
type Net uint32

// NetAny is the wildcard net (LNET_NET_ANY, the net part of NIDAny).
const NetAny Net = 0xFFFFFFFF

// MakeNet builds a Net from an LND type and a network number.
func MakeNet(t LNDType, num uint16) Net { return Net(uint32(t)<<16 | uint32(num)) }

// Type returns the LND type of the net.
func (n Net) Type() LNDType { return LNDType(n >> 16) }

// Num returns the network number ("tcp1" → 1).
func (n Net) Num() uint16 { return uint16(n) }

// String formats the net as Lustre does: "tcp", "o2ib3", "lo", or
// "<type:num>" for an LND without a name.
func (n Net) String() string {
	return string(n.appendTo(make([]byte, 0, 16)))
}

func (n Net) appendTo(b []byte) []byte {
	if n == NetAny {
		return append(b, "<?>"...)
	}
	e, ok := lookupType(n.Type())
	if !ok {
		b = append(b, '<')
		b = strconv.AppendUint(b, uint64(n.Type()), 10)
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(n.Num()), 10)
		return append(b, '>')
	}
	b = append(b, e.name...)
	if n.Num() != 0 {
		b = strconv.AppendUint(b, uint64(n.Num()), 10)
	}
	return b
}

// ParseNet parses a network name: "tcp", "tcp0", "tcp1", "o2ib3", "lo",
// optionally preceded by '@' ("@tcp1"). A missing number means 0.
func ParseNet(s string) (Net, error) {
	in := s
	s = strings.TrimPrefix(s, "@")
	if s == "" {
		return 0, &NIDError{in, "empty network name"}
	}
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	name, num := s[:i], s[i:]
	if name == "" {
		return 0, &NIDError{in, "network name has no LND type"}
	}
	t, ok := ParseLNDType(name)
	if !ok {
		return 0, &NIDError{in, "unknown LND type " + strconv.Quote(name)}
	}
	var n uint64
	if num != "" {
		if len(num) > 1 && num[0] == '0' {
			return 0, &NIDError{in, "network number has leading zeros"}
		}
		var err error
		n, err = strconv.ParseUint(num, 10, 16)
		if err != nil {
			return 0, &NIDError{in, "network number out of range (0..65535)"}
		}
	}
	return MakeNet(t, uint16(n)), nil
}

// NID is a 64-bit LNet network identifier (nid4): the net in the upper 32
// bits and the address in the lower 32 (lnet-wire.md §2.1).
type NID uint64

// Reserved NIDs.
const (
	// NIDAny is the wildcard NID (LNET_NID_ANY, all ones).
	NIDAny NID = 0xFFFFFFFFFFFFFFFF
	// NIDLo0 is the loopback NID 0@lo (LNET_NID_LO_0).
	NIDLo0 NID = NID(uint64(LOLND) << 48)
)

// MakeNID builds a NID from a net and an address.
func MakeNID(n Net, addr uint32) NID { return NID(uint64(n)<<32 | uint64(addr)) }

// Net returns the net part of the NID.
func (n NID) Net() Net { return Net(n >> 32) }

// Addr returns the address part of the NID (an IPv4 address for tcp and
// o2ib, host byte order: 192.168.1.1 is 0xC0A80101).
func (n NID) Addr() uint32 { return uint32(n) }

// Valid reports whether the NID has the required zero top byte (a net type
// above 0xFF cannot be encoded on the wire) and is not NIDAny.
func (n NID) Valid() bool { return n != NIDAny && n>>56 == 0 }

// String formats the NID as Lustre does: "192.168.1.1@tcp",
// "10.0.0.1@o2ib1", "0@lo", "<?>" for NIDAny, or "0x..@<type:num>" for an
// LND without a name.
func (n NID) String() string {
	return string(n.AppendText(make([]byte, 0, 32)))
}

// AppendText appends the string form of the NID to b.
func (n NID) AppendText(b []byte) []byte {
	if n == NIDAny {
		return append(b, "<?>"...)
	}
	e, ok := lookupType(n.Net().Type())
	switch {
	case !ok:
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, uint64(n.Addr()), 16)
	case e.addr == addrIP:
		a := n.Addr()
		b = strconv.AppendUint(b, uint64(a>>24), 10)
		b = append(b, '.')
		b = strconv.AppendUint(b, uint64(a>>16&0xFF), 10)
		b = append(b, '.')
		b = strconv.AppendUint(b, uint64(a>>8&0xFF), 10)
		b = append(b, '.')
		b = strconv.AppendUint(b, uint64(a&0xFF), 10)
	default:
		b = strconv.AppendUint(b, uint64(n.Addr()), 10)
	}
	b = append(b, '@')
	return n.Net().appendTo(b)
}

// ParseNID parses "addr@net": "192.168.1.2@tcp", "10.0.0.1@o2ib3",
// "0@lo", "12@gni". The string "<?>" and "*" parse as NIDAny. Errors match
// ErrBadNID and say what is wrong.
func ParseNID(s string) (NID, error) {
	if s == "<?>" || s == "*" {
		return NIDAny, nil
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return 0, &NIDError{s, "missing '@net'"}
	}
	addrStr, netStr := s[:at], s[at+1:]
	if netStr == "" {
		return 0, &NIDError{s, "empty network name"}
	}
	net, err := ParseNet(netStr)
	if err != nil {
		return 0, &NIDError{s, err.(*NIDError).Reason}
	}
	if addrStr == "" {
		return 0, &NIDError{s, "empty address"}
	}
	e, _ := lookupType(net.Type())
	var addr uint32
	switch e.addr {
	case addrIP:
		a, ok := parseIPv4(addrStr)
		if !ok {
			return 0, &NIDError{s, "address is not an IPv4 dotted quad"}
		}
		addr = a
	case addrLo:
		if addrStr != "0" {
			return 0, &NIDError{s, "loopback address must be 0"}
		}
	default:
		v, err := strconv.ParseUint(addrStr, 10, 32)
		if err != nil || (len(addrStr) > 1 && addrStr[0] == '0') {
			return 0, &NIDError{s, "address is not a decimal number (0..4294967295)"}
		}
		addr = uint32(v)
	}
	return MakeNID(net, addr), nil
}

// MustParseNID is ParseNID for constants in tests and examples; it panics
// on error.
func MustParseNID(s string) NID {
	n, err := ParseNID(s)
	if err != nil {
		panic(err)
	}
	return n
}

// parseIPv4 parses a strict dotted quad (no leading zeros, four parts).
func parseIPv4(s string) (uint32, bool) {
	var a uint32
	for part := 0; part < 4; part++ {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 || i > 3 || (i > 1 && s[0] == '0') {
			return 0, false
		}
		v, _ := strconv.Atoi(s[:i])
		if v > 255 {
			return 0, false
		}
		a = a<<8 | uint32(v)
		s = s[i:]
		if part < 3 {
			if s == "" || s[0] != '.' {
				return 0, false
			}
			s = s[1:]
		}
	}
	return a, s == ""
}

// PID is an LNet process id within a node.
type PID uint32

// Reserved PIDs and flags (lnet-wire.md §1.7).
const (
	// PIDAny is the wildcard PID (LNET_PID_ANY).
	PIDAny PID = 0xFFFFFFFF
	// PIDLustre is the PID of kernel Lustre services (LNET_PID_LUSTRE).
	PIDLustre PID = 12345
	// PIDUserFlag marks a userspace peer (LNET_PID_USERFLAG); a kernel
	// socklnd peer reaching from an unprivileged port gets port|PIDUserFlag.
	PIDUserFlag PID = 0x80000000
)

// IsUser reports whether the PID carries the userspace flag.
func (p PID) IsUser() bool { return p != PIDAny && p&PIDUserFlag != 0 }

// String formats the PID in decimal ("12345"), with a "u" suffix for the
// user-flag bit ("12345u" for 12345|PIDUserFlag) and "*" for PIDAny.
func (p PID) String() string {
	switch {
	case p == PIDAny:
		return "*"
	case p.IsUser():
		return strconv.FormatUint(uint64(p&^PIDUserFlag), 10) + "u"
	}
	return strconv.FormatUint(uint64(p), 10)
}

// ProcessID names an LNet endpoint: a node and a process on it
// (struct lnet_process_id).
type ProcessID struct {
	NID NID
	PID PID
}

// ProcessIDAny matches every initiator in a match entry.
var ProcessIDAny = ProcessID{NIDAny, PIDAny}

// String formats the id as Lustre does: "12345-192.168.1.1@tcp".
func (id ProcessID) String() string {
	return id.PID.String() + "-" + id.NID.String()
}

// ParseProcessID parses "pid-nid" ("12345-10.0.0.1@tcp"); a bare NID gets
// PIDLustre. "*" as pid means PIDAny and a "u" suffix sets PIDUserFlag.
func ParseProcessID(s string) (ProcessID, error) {
	dash := strings.IndexByte(s, '-')
	if dash < 0 {
		n, err := ParseNID(s)
		return ProcessID{n, PIDLustre}, err
	}
	pidStr := s[:dash]
	n, err := ParseNID(s[dash+1:])
	if err != nil {
		return ProcessID{}, err
	}
	if pidStr == "*" {
		return ProcessID{n, PIDAny}, nil
	}
	var flag PID
	if strings.HasSuffix(pidStr, "u") {
		flag = PIDUserFlag
		pidStr = pidStr[:len(pidStr)-1]
	}
	v, err := strconv.ParseUint(pidStr, 10, 32)
	if err != nil || (flag != 0 && v >= uint64(PIDUserFlag)) {
		return ProcessID{}, &NIDError{s, "bad pid " + strconv.Quote(s[:dash])}
	}
	return ProcessID{n, PID(v) | flag}, nil
}
