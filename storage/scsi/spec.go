package scsi

import (
	"fmt"
	"strconv"
	"strings"
)

// OpenSpec opens the backend a command-line LUN spec names:
//
//	file:/path[,size=N][,ro][,bs=512|4096]   a file (created with size=)
//	mem:N[,bs=512|4096]                       N bytes of memory
//
// Sizes take a K, M, G or T suffix (powers of 1024). Unknown options
// are refused.
func OpenSpec(spec string) (Backend, LUNConfig, error) {
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, LUNConfig{}, fmt.Errorf("scsi: LUN %q: want file:/path[,size=N] or mem:SIZE", spec)
	}
	parts := strings.Split(rest, ",")
	var cfg LUNConfig
	var size int64
	first := parts[0]
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch {
		case k == "size" && kind == "file":
			n, err := ParseSize(v)
			if err != nil {
				return nil, cfg, err
			}
			size = n
		case k == "ro" && v == "" && kind == "file":
			cfg.ReadOnly = true
		case k == "bs":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || (n != 512 && n != 4096) {
				return nil, cfg, fmt.Errorf("scsi: LUN %q: bs=%s (512 or 4096)", spec, v)
			}
			cfg.BlockSize = uint32(n)
		default:
			return nil, cfg, fmt.Errorf("scsi: LUN %q: unknown option %q", spec, p)
		}
	}
	switch kind {
	case "file":
		if first == "" {
			return nil, cfg, fmt.Errorf("scsi: LUN %q: no path", spec)
		}
		cfg.Name = first
		b, err := OpenFile(first, size, cfg.ReadOnly)
		if err != nil {
			return nil, cfg, err
		}
		return b, cfg, nil
	case "mem":
		n, err := ParseSize(first)
		if err != nil {
			return nil, cfg, err
		}
		if n < 4096 || n > 1<<40 {
			return nil, cfg, fmt.Errorf("scsi: LUN %q: memory size %d (4 KiB..1 TiB)", spec, n)
		}
		return NewMemBackend(n), cfg, nil
	}
	return nil, cfg, fmt.Errorf("scsi: LUN %q: kind %q (file or mem)", spec, kind)
}

// ParseSize reads a byte count with an optional K, M, G or T suffix.
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] | 0x20 {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > (1<<50)/mult {
		return 0, fmt.Errorf("scsi: size %q", s)
	}
	return v * mult, nil
}
