package scsi

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
)

// LUNConfig describes a logical unit.
type LUNConfig struct {
	// BlockSize is the logical block size: 512 (default) or 4096.
	BlockSize uint32
	// ReadOnly rejects writes with DATA PROTECT / WRITE PROTECTED.
	ReadOnly bool
	// Serial is the unit serial number (VPD 0x80); derived from the LUN
	// number and Name when empty.
	Serial string
	// Name seeds the unit's NAA identifier (VPD 0x83), e.g. the backing
	// file's path, so that a restarted target presents the same disk.
	Name string
	// MaxTransfer is the largest READ/WRITE in bytes the transport can
	// move (VPD 0xB0's MAXIMUM TRANSFER LENGTH); 0 means no limit.
	MaxTransfer uint32
}

// LUN is a logical unit.
type LUN struct {
	id      uint64
	b       Backend
	bs      uint32
	blocks  uint64
	ro      bool
	serial  string
	naa     [16]byte
	maxXfer uint32 // in blocks, 0 = none
}

// ID returns the LUN number.
func (l *LUN) ID() uint64 { return l.id }

// BlockSize returns the logical block size.
func (l *LUN) BlockSize() uint32 { return l.bs }

// Blocks returns the capacity in logical blocks.
func (l *LUN) Blocks() uint64 { return l.blocks }

// Backend returns the unit's storage.
func (l *LUN) Backend() Backend { return l.b }

// Counters are a target's command counters.
type Counters struct {
	Commands, Reads, Writes, CheckConditions, Aborts, Resets atomic.Uint64
	BytesRead, BytesWritten                                  atomic.Uint64
}

// Target is a set of logical units and the tasks running on them.
type Target struct {
	mu    sync.RWMutex
	luns  map[uint64]*LUN
	ids   []uint64 // sorted
	tasks taskSet
	// Stats counts commands and bytes.
	Stats Counters
}

// NewTarget returns a target without LUNs.
func NewTarget() *Target {
	return &Target{luns: map[uint64]*LUN{}, tasks: taskSet{m: map[taskKey]*Task{}}}
}

// AddLUN adds logical unit id on backend b.
func (t *Target) AddLUN(id uint64, b Backend, cfg LUNConfig) (*LUN, error) {
	if id >= 1<<14 {
		return nil, fmt.Errorf("scsi: LUN %d: only 0..16383 (peripheral and flat addressing)", id)
	}
	bs := cfg.BlockSize
	if bs == 0 {
		bs = 512
	}
	if bs != 512 && bs != 4096 {
		return nil, fmt.Errorf("scsi: LUN %d: block size %d (512 or 4096)", id, bs)
	}
	blocks := uint64(b.Size()) / uint64(bs)
	if blocks == 0 {
		return nil, fmt.Errorf("scsi: LUN %d: backend of %d bytes holds no %d-byte block", id, b.Size(), bs)
	}
	l := &LUN{id: id, b: b, bs: bs, blocks: blocks, ro: cfg.ReadOnly, serial: cfg.Serial, maxXfer: cfg.MaxTransfer / bs}
	h := fnv.New64a()
	fmt.Fprintf(h, "softib lun %d %s", id, cfg.Name)
	sum := h.Sum64()
	if l.serial == "" {
		l.serial = fmt.Sprintf("softib%016x", sum)
	}
	// NAA 6 (IEEE registered extended): an OUI then a vendor-specific
	// identifier; the OUI here is a locally administered placeholder.
	l.naa[0] = 0x60 | 0x0a
	l.naa[1], l.naa[2] = 0x1b, 0x1e
	binary.BigEndian.PutUint64(l.naa[3:11], sum)
	binary.BigEndian.PutUint32(l.naa[11:15], uint32(id))
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.luns[id]; dup {
		return nil, fmt.Errorf("scsi: LUN %d added twice", id)
	}
	t.luns[id] = l
	t.ids = append(t.ids, id)
	slices.Sort(t.ids)
	return l, nil
}

// LUN returns logical unit id, or nil.
func (t *Target) LUN(id uint64) *LUN {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.luns[id]
}

// Close closes every backend.
func (t *Target) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first error
	for _, l := range t.luns {
		if err := l.b.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Result is the outcome of a command.
type Result struct {
	Status Status
	// Sense is valid with StatusCheckCondition.
	Sense Sense
	// DataIn is the number of bytes of data-in the command put at the
	// start of its buffer.
	DataIn int
}

func check(s Sense) Result { return Result{Status: StatusCheckCondition, Sense: s} }

// EncodeLUN returns the 8-byte SAM LUN structure for id: peripheral
// device addressing below 256, flat space addressing above (as Linux's
// scsilun_to_int reads them back).
func EncodeLUN(id uint64) [8]byte {
	var b [8]byte
	if id < 256 {
		b[1] = byte(id)
	} else {
		b[0] = 0x40 | byte(id>>8)&0x3f
		b[1] = byte(id)
	}
	return b
}

// DecodeLUN returns the LUN number of an 8-byte SAM LUN structure in the
// peripheral or flat space addressing method; ok is false for other
// methods or a nonzero second level.
func DecodeLUN(b [8]byte) (id uint64, ok bool) {
	if binary.BigEndian.Uint64(b[:])&0x0000ffffffffffff != 0 {
		return 0, false
	}
	switch b[0] >> 6 {
	case 0:
		if b[0] != 0 {
			return 0, false
		}
		return uint64(b[1]), true
	case 1:
		return uint64(b[0]&0x3f)<<8 | uint64(b[1]), true
	}
	return 0, false
}
