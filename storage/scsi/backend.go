package scsi

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Backend stores a logical unit's blocks.
type Backend interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes completed writes durable.
	Sync() error
	// Size is the capacity in bytes.
	Size() int64
	// Discard deallocates n bytes at off; they read back as zeros.
	Discard(off, n int64) error
	Close() error
}

// Align is the memory and I/O alignment O_DIRECT needs; [AlignedBuf]
// returns buffers aligned to it, so transports that use them get direct
// I/O.
const Align = 4096

// AlignedBuf returns an n-byte slice whose first byte is Align-aligned.
func AlignedBuf(n int) []byte {
	b := make([]byte, n+Align)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (Align - 1))
	if off != 0 {
		off = Align - off
	}
	return b[off : off+n : off+n]
}

func aligned(p []byte, off int64) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(&p[0]))&(Align-1) == 0 && len(p)%512 == 0 && off%512 == 0
}

// MemBackend is a Backend in memory.
type MemBackend struct {
	mu  sync.RWMutex
	buf []byte
}

// NewMemBackend returns a zeroed in-memory backend of size bytes.
func NewMemBackend(size int64) *MemBackend { return &MemBackend{buf: make([]byte, size)} }

// ReadAt implements io.ReaderAt.
func (m *MemBackend) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, fmt.Errorf("scsi: read [%d,+%d) beyond %d bytes", off, len(p), len(m.buf))
	}
	return copy(p, m.buf[off:]), nil
}

// WriteAt implements io.WriterAt.
func (m *MemBackend) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, fmt.Errorf("scsi: write [%d,+%d) beyond %d bytes", off, len(p), len(m.buf))
	}
	return copy(m.buf[off:], p), nil
}

// Sync does nothing: memory is as durable as it gets.
func (m *MemBackend) Sync() error { return nil }

// Size returns the capacity.
func (m *MemBackend) Size() int64 { return int64(len(m.buf)) }

// Discard zeroes the range.
func (m *MemBackend) Discard(off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || n < 0 || off+n > int64(len(m.buf)) {
		return fmt.Errorf("scsi: discard [%d,+%d) beyond %d bytes", off, n, len(m.buf))
	}
	clear(m.buf[off : off+n])
	return nil
}

// Close releases nothing.
func (m *MemBackend) Close() error { return nil }

// FileBackend is a Backend on a file. It opens the file twice: with
// O_DIRECT (when the file system allows it) for aligned I/O, so that the
// target's data does not pass through the host's page cache twice, and
// buffered for unaligned I/O. Linux keeps the two coherent (direct I/O
// writes back and invalidates cached pages of its range first). On darwin
// the second file has F_NOCACHE instead of O_DIRECT; on systems with
// neither, all I/O is buffered ([FileBackend.Direct] reports false).
type FileBackend struct {
	buffered *os.File
	direct   *os.File // nil when the file system refused O_DIRECT
	size     int64
	// noDirect is set once a direct I/O failed with EINVAL (an
	// alignment the file system wants larger than ours).
	noDirect atomic.Bool
}

// OpenFile opens (creating it if size > 0 and it does not exist) path as
// a backend. A size > 0 extends a smaller file to size; 0 takes the
// file's size, which must then be at least one 512-byte block.
func OpenFile(path string, size int64, readOnly bool) (*FileBackend, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	} else if size > 0 {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() && st.Mode()&os.ModeDevice == 0 {
		f.Close()
		return nil, fmt.Errorf("scsi: %s is neither a regular file nor a block device", path)
	}
	cur := st.Size()
	if st.Mode()&os.ModeDevice != 0 {
		if cur, err = f.Seek(0, 2); err != nil {
			f.Close()
			return nil, err
		}
	}
	switch {
	case size > cur && readOnly:
		f.Close()
		return nil, fmt.Errorf("scsi: %s has %d bytes, fewer than size=%d, and is read-only", path, cur, size)
	case size > cur:
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, err
		}
	case size == 0:
		size = cur
	}
	if size < 512 {
		f.Close()
		return nil, fmt.Errorf("scsi: %s: a LUN needs at least 512 bytes, has %d", path, size)
	}
	b := &FileBackend{buffered: f, size: size}
	if d, err := openDirect(path, flag&^os.O_CREATE); err == nil {
		b.direct = d
	}
	return b, nil
}

// Direct reports whether aligned I/O bypasses the page cache.
func (b *FileBackend) Direct() bool { return b.direct != nil && !b.noDirect.Load() }

func (b *FileBackend) pick(p []byte, off int64) *os.File {
	if b.direct != nil && !b.noDirect.Load() && aligned(p, off) {
		return b.direct
	}
	return b.buffered
}

// ReadAt implements io.ReaderAt.
func (b *FileBackend) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > b.size {
		return 0, fmt.Errorf("scsi: read [%d,+%d) beyond %d bytes", off, len(p), b.size)
	}
	f := b.pick(p, off)
	n, err := f.ReadAt(p, off)
	if f == b.direct && errors.Is(err, unix.EINVAL) {
		b.noDirect.Store(true)
		return b.buffered.ReadAt(p, off)
	}
	return n, err
}

// WriteAt implements io.WriterAt.
func (b *FileBackend) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > b.size {
		return 0, fmt.Errorf("scsi: write [%d,+%d) beyond %d bytes", off, len(p), b.size)
	}
	f := b.pick(p, off)
	n, err := f.WriteAt(p, off)
	if f == b.direct && errors.Is(err, unix.EINVAL) {
		b.noDirect.Store(true)
		return b.buffered.WriteAt(p, off)
	}
	return n, err
}

// Sync flushes the file.
func (b *FileBackend) Sync() error { return b.buffered.Sync() }

// Size returns the capacity.
func (b *FileBackend) Size() int64 { return b.size }

// Discard punches a hole (the range reads back as zeros); where the file
// system cannot, it writes zeros.
func (b *FileBackend) Discard(off, n int64) error {
	if off < 0 || n < 0 || off+n > b.size {
		return fmt.Errorf("scsi: discard [%d,+%d) beyond %d bytes", off, n, b.size)
	}
	if punchHole(b.buffered, off, n) == nil {
		return nil
	}
	zero := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(zero)))
		if _, err := b.buffered.WriteAt(zero[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// Close closes the file.
func (b *FileBackend) Close() error {
	if b.direct != nil {
		b.direct.Close()
	}
	return b.buffered.Close()
}
