package selftest

import (
	"fmt"
	"strconv"
	"strings"
)

// Dist is a --distribute a:b setting: the clients are cut into chunks of
// Src consecutive clients, and chunk k talks to Dst servers starting at
// server k*Dst (wrapping around). 0 stands for "N", the whole group.
//
//	1:1  client i → server i mod S (the lst default)
//	1:N  every client → every server
//	N:N  every client → every server (one chunk)
//	2:1  clients 0,1 → server 0; clients 2,3 → server 1; ...
type Dist struct{ Src, Dst int }

// ParseDist parses "a:b" where a and b are positive numbers or N.
func ParseDist(s string) (Dist, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return Dist{}, fmt.Errorf("--distribute %q: want a:b, e.g. 1:1, 1:N or N:N", s)
	}
	parse := func(x string) (int, error) {
		if x == "N" || x == "n" {
			return 0, nil
		}
		v, err := strconv.Atoi(x)
		if err != nil || v < 1 {
			return 0, fmt.Errorf("--distribute %q: %q is neither a positive number nor N", s, x)
		}
		return v, nil
	}
	var d Dist
	var err error
	if d.Src, err = parse(a); err != nil {
		return Dist{}, err
	}
	if d.Dst, err = parse(b); err != nil {
		return Dist{}, err
	}
	return d, nil
}

// String prints the a:b form.
func (d Dist) String() string {
	f := func(v int) string {
		if v == 0 {
			return "N"
		}
		return strconv.Itoa(v)
	}
	return f(d.Src) + ":" + f(d.Dst)
}

// Map returns, for each of nClients clients, the indices of the servers
// it talks to. Every client gets at least one server when nServers > 0,
// and each server appears at most once per client.
func (d Dist) Map(nClients, nServers int) [][]int {
	out := make([][]int, nClients)
	if nServers == 0 {
		return out
	}
	src, dst := d.Src, d.Dst
	if src <= 0 || src > nClients {
		src = max(nClients, 1)
	}
	if dst <= 0 || dst > nServers {
		dst = nServers
	}
	for i := range out {
		k := i / src
		s := make([]int, dst)
		for j := range s {
			s[j] = (k*dst + j) % nServers
		}
		out[i] = s
	}
	return out
}
