// Package vhostusertest is a vhost-user frontend written for tests: it
// speaks the control protocol on a backend's socket the way a virtio-user
// port does, shares a memfd as the guest's memory, and lays out split
// virtqueues in it. A well-behaved Frontend brings a device up and sends
// frames; every step is also exposed on its own, so that a test can send
// what no sane frontend would (a bad memory table, a ring size that is not a
// power of two, a descriptor outside guest memory, a descriptor loop, a
// vring resized under the device, a message cut short, memory truncated).
//
// Guest memory is one memfd of MemSize bytes. Its guest physical address
// and its frontend ("user") address are both Base: the backend translates
// ring addresses through the latter and descriptor addresses through the
// former, and nothing here depends on them differing.
package vhostusertest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Requests of the vhost-user protocol (docs: qemu's vhost-user.rst).
const (
	GetFeatures  = 1
	SetFeatures  = 2
	SetOwner     = 3
	SetMemTable  = 5
	SetVringNum  = 8
	SetVringAddr = 9
	SetVringBase = 10
	SetVringKick = 12
	SetVringCall = 13
)

// Header flags.
const (
	Version   = 0x1
	Reply     = 0x4
	NeedReply = 0x8 // ask for an ack (meaningful only with REPLY_ACK)
)

// Feature bits the frontend may negotiate.
const (
	FeatureCsum     = 1 << 0  // VIRTIO_NET_F_CSUM: the backend reads the header's offloads
	FeatureHostTSO4 = 1 << 11 // VIRTIO_NET_F_HOST_TSO4
	FeatureIndirect = 1 << 28 // VIRTIO_RING_F_INDIRECT_DESC
	FeatureVersion1 = 1 << 32 // VIRTIO_F_VERSION_1: 12-byte virtio-net header
)

// Descriptor flags.
const (
	DescNext     = 1
	DescWrite    = 2
	DescIndirect = 4
)

// Layout of guest memory.
const (
	MemSize   = 2 << 20
	Base      = 0x40000000 // guest physical and user address of offset 0
	RingSize  = 256
	ringBytes = 0x4000 // per vring: desc 0x1000, avail 0x1000, used 0x2000
	bufOff    = 0x10000
	BufSize   = 0x800
	// HdrLen is the virtio-net header with VERSION_1.
	HdrLen = 12
)

// Region is one entry of a memory table, as on the wire.
type Region struct {
	GPA, Size, UserAddr, Offset uint64
}

// Frontend is one connection to a backend.
type Frontend struct {
	sock  int
	memfd int
	Mem   []byte
	kick  [2]int
	call  [2]int
	avail [2]uint16 // next avail index per vring
}

// Dial connects to a backend's socket and creates guest memory.
func Dial(path string) (*Frontend, error) { return dial(path, 0) }

// DialHuge is Dial with guest memory in one 2 MiB huge page (a memfd made
// with MFD_HUGETLB, as DPDK's EAL makes them with --in-memory).
func DialHuge(path string) (*Frontend, error) { return dial(path, unix.MFD_HUGETLB) }

func dial(path string, memfdFlags int) (*Frontend, error) {
	f := &Frontend{sock: -1, memfd: -1, kick: [2]int{-1, -1}, call: [2]int{-1, -1}}
	var err error
	if f.sock, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("vhostusertest: socket: %w", err)
	}
	if err = unix.Connect(f.sock, &unix.SockaddrUnix{Name: path}); err != nil {
		f.Close()
		return nil, fmt.Errorf("vhostusertest: connect %s: %w", path, err)
	}
	if f.memfd, err = unix.MemfdCreate("vhostusertest", unix.MFD_CLOEXEC|memfdFlags); err != nil {
		f.Close()
		return nil, fmt.Errorf("vhostusertest: memfd: %w", err)
	}
	if err = unix.Ftruncate(f.memfd, MemSize); err != nil {
		f.Close()
		return nil, fmt.Errorf("vhostusertest: ftruncate: %w", err)
	}
	if f.Mem, err = unix.Mmap(f.memfd, 0, MemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		f.Close()
		return nil, fmt.Errorf("vhostusertest: mmap: %w", err)
	}
	for i := range 2 {
		if f.kick[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			f.Close()
			return nil, fmt.Errorf("vhostusertest: eventfd: %w", err)
		}
		if f.call[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			f.Close()
			return nil, fmt.Errorf("vhostusertest: eventfd: %w", err)
		}
	}
	return f, nil
}

// Close hangs up and frees guest memory.
func (f *Frontend) Close() {
	for _, fd := range []*int{&f.sock, &f.memfd, &f.kick[0], &f.kick[1], &f.call[0], &f.call[1]} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	if f.Mem != nil {
		_ = unix.Munmap(f.Mem)
		f.Mem = nil
	}
}

// MemFd is the memfd behind guest memory.
func (f *Frontend) MemFd() int { return f.memfd }

// Send sends one message with fds attached.
func (f *Frontend) Send(req, flags uint32, payload []byte, fds ...int) error {
	msg := make([]byte, 12+len(payload))
	binary.LittleEndian.PutUint32(msg[0:], req)
	binary.LittleEndian.PutUint32(msg[4:], flags)
	binary.LittleEndian.PutUint32(msg[8:], uint32(len(payload)))
	copy(msg[12:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(f.sock, msg, oob, nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("vhostusertest: request %d: %w", req, err)
	}
	return nil
}

// SendHeader sends only a message's header, claiming size payload bytes:
// a frontend that stops in the middle of a message.
func (f *Frontend) SendHeader(req, flags, size uint32) error {
	hdr := binary.LittleEndian.AppendUint32(nil, req)
	hdr = binary.LittleEndian.AppendUint32(hdr, flags)
	hdr = binary.LittleEndian.AppendUint32(hdr, size)
	if _, err := unix.Write(f.sock, hdr); err != nil {
		return fmt.Errorf("vhostusertest: header of request %d: %w", req, err)
	}
	return nil
}

// recv reads one reply to req.
func (f *Frontend) recv(req uint32, timeout time.Duration) ([]byte, error) {
	hdr := make([]byte, 12)
	if err := f.readFull(hdr, timeout); err != nil {
		return nil, fmt.Errorf("vhostusertest: reply to %d: %w", req, err)
	}
	if got := binary.LittleEndian.Uint32(hdr); got != req || binary.LittleEndian.Uint32(hdr[4:])&Reply == 0 {
		return nil, fmt.Errorf("vhostusertest: reply to %d: got request %d flags %#x", req, got, binary.LittleEndian.Uint32(hdr[4:]))
	}
	payload := make([]byte, binary.LittleEndian.Uint32(hdr[8:]))
	if err := f.readFull(payload, timeout); err != nil {
		return nil, fmt.Errorf("vhostusertest: reply to %d: %w", req, err)
	}
	return payload, nil
}

func (f *Frontend) readFull(b []byte, timeout time.Duration) error {
	for len(b) > 0 {
		fds := []unix.PollFd{{Fd: int32(f.sock), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(timeout.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("timed out")
		}
		if n, err = unix.Read(f.sock, b); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("the backend hung up")
		}
		b = b[n:]
	}
	return nil
}

// HungUp reports whether the backend closed the connection within timeout
// (how librte_vhost refuses a message: it logs and hangs up).
func (f *Frontend) HungUp(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left < 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(f.sock), Events: unix.POLLIN | unix.POLLRDHUP}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		var b [1]byte
		n, _, err = unix.Recvfrom(f.sock, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == nil && n == 0 || err == unix.ECONNRESET {
			return true
		}
		if err == nil {
			return false // a message, not a hang-up
		}
	}
}

// GetFeatures asks for the backend's features.
func (f *Frontend) GetFeatures() (uint64, error) {
	if err := f.Send(GetFeatures, Version, nil); err != nil {
		return 0, err
	}
	p, err := f.recv(GetFeatures, 5*time.Second)
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("vhostusertest: GET_FEATURES reply of %d bytes", len(p))
	}
	return binary.LittleEndian.Uint64(p), nil
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// Negotiate sends SET_OWNER and SET_FEATURES with want & the backend's
// features, and returns what was set.
func (f *Frontend) Negotiate(want uint64) (uint64, error) {
	offered, err := f.GetFeatures()
	if err != nil {
		return 0, err
	}
	if err := f.Send(SetOwner, Version, nil); err != nil {
		return 0, err
	}
	set := offered & want
	return set, f.Send(SetFeatures, Version, u64(set))
}

// Shared negotiates VERSION_1 and shares guest memory: a device with no
// vring yet, for a test to set them as it likes.
func (f *Frontend) Shared() error {
	if _, err := f.Negotiate(FeatureVersion1); err != nil {
		return err
	}
	return f.SetMemTable()
}

// Whole is the memory table entry covering all of guest memory.
func Whole() Region { return Region{GPA: Base, Size: MemSize, UserAddr: Base} }

// SetMemTableRaw sends SET_MEM_TABLE with nregions in its header (which
// may disagree with len(regions)) and the given fds.
func (f *Frontend) SetMemTableRaw(nregions uint32, regions []Region, fds ...int) error {
	p := binary.LittleEndian.AppendUint32(nil, nregions)
	p = binary.LittleEndian.AppendUint32(p, 0)
	for _, r := range regions {
		for _, v := range []uint64{r.GPA, r.Size, r.UserAddr, r.Offset} {
			p = binary.LittleEndian.AppendUint64(p, v)
		}
	}
	return f.Send(SetMemTable, Version, p, fds...)
}

// SetMemTable shares guest memory as one region.
func (f *Frontend) SetMemTable() error {
	return f.SetMemTableRaw(1, []Region{Whole()}, f.memfd)
}

func state(idx, num uint32) []byte {
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, idx), num)
}

// SetVringNum sends SET_VRING_NUM with the given flags.
func (f *Frontend) SetVringNum(idx, num, flags uint32) error {
	return f.Send(SetVringNum, flags, state(idx, num))
}

func ringOff(q int) int { return q * ringBytes }

// SetVringBase sends SET_VRING_BASE: vring idx's next avail index.
func (f *Frontend) SetVringBase(idx, base uint32) error {
	return f.Send(SetVringBase, Version, state(idx, base))
}

// Vring sets vring q (0: the guest's RX, 1: its TX) up at its place in
// guest memory: num, base 0, addresses, call and kick eventfds.
func (f *Frontend) Vring(q int) error {
	off := uint64(Base + ringOff(q))
	return f.VringAt(q, RingSize, off, off+0x1000, off+0x2000)
}

// VringAt is Vring with num entries and the rings at the given guest
// addresses (Post and Used keep to Vring's places).
func (f *Frontend) VringAt(q int, num uint32, desc, avail, used uint64) error {
	addr := binary.LittleEndian.AppendUint32(nil, uint32(q))
	addr = binary.LittleEndian.AppendUint32(addr, 0)
	for _, v := range []uint64{desc, used, avail, 0} { // desc, used, avail, log
		addr = binary.LittleEndian.AppendUint64(addr, v)
	}
	for _, step := range []func() error{
		func() error { return f.Send(SetVringCall, Version, u64(uint64(q)), f.call[q]) },
		func() error { return f.SetVringNum(uint32(q), num, Version) },
		func() error { return f.SetVringBase(uint32(q), 0) },
		func() error { return f.Send(SetVringAddr, Version, addr) },
		func() error { return f.SetVringKick(q, f.kick[q]) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// Up brings a device up the way virtio-user does (without protocol
// features): negotiate VERSION_1 (and indirect descriptors when the backend
// offers them), share guest memory, set both vrings of queue pair 0. The
// backend starts the device once the TX vring's kick fd arrives.
func (f *Frontend) Up() (features uint64, err error) {
	return f.UpWith(0)
}

// UpWith is Up with more features asked for (those the backend offers are
// negotiated): FeatureCsum|FeatureHostTSO4 makes the backend read the
// virtio-net header's offload fields.
func (f *Frontend) UpWith(more uint64) (features uint64, err error) {
	if features, err = f.Negotiate(FeatureVersion1 | FeatureIndirect | more); err != nil {
		return 0, err
	}
	if features&FeatureVersion1 == 0 {
		return 0, errors.New("vhostusertest: the backend does not offer VERSION_1")
	}
	if err = f.SetMemTable(); err != nil {
		return 0, err
	}
	for q := range 2 {
		if err = f.Vring(q); err != nil {
			return 0, err
		}
	}
	return features, nil
}

// Buf returns the guest physical address of buffer slot n and its bytes.
func (f *Frontend) Buf(n int) (uint64, []byte) {
	off := bufOff + n*BufSize
	return uint64(Base + off), f.Mem[off : off+BufSize]
}

// SetDesc writes descriptor i of vring q.
func (f *Frontend) SetDesc(q, i int, addr uint64, length uint32, flags, next uint16) {
	d := f.Mem[ringOff(q)+16*i:]
	binary.LittleEndian.PutUint64(d[0:], addr)
	binary.LittleEndian.PutUint32(d[8:], length)
	binary.LittleEndian.PutUint16(d[12:], flags)
	binary.LittleEndian.PutUint16(d[14:], next)
}

// PutDesc writes a descriptor into any table in guest memory, at guest
// physical address at (an indirect table, say).
func (f *Frontend) PutDesc(at uint64, addr uint64, length uint32, flags, next uint16) {
	d := f.Mem[at-Base:]
	binary.LittleEndian.PutUint64(d[0:], addr)
	binary.LittleEndian.PutUint32(d[8:], length)
	binary.LittleEndian.PutUint16(d[12:], flags)
	binary.LittleEndian.PutUint16(d[14:], next)
}

// Post makes the chain at head available on vring q and kicks.
func (f *Frontend) Post(q int, head uint16) error {
	idx := f.avail[q]
	return f.PostAt(q, int(idx%RingSize), head, idx+1)
}

// PostAt writes head into entry slot of vring q's avail ring (at Vring's
// place, for a ring of any size), publishes idx as its index and kicks.
func (f *Frontend) PostAt(q, slot int, head, idx uint16) error {
	avail := f.Mem[ringOff(q)+0x1000:]
	binary.LittleEndian.PutUint16(avail[4+2*slot:], head)
	f.avail[q] = idx
	// flags 0 and the new index in one release store: the ring entry is
	// visible before the index.
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&avail[0])), uint32(idx)<<16)
	return f.Kick(q)
}

// Kick writes vring q's kick eventfd.
func (f *Frontend) Kick(q int) error {
	if _, err := unix.Write(f.kick[q], u64(1)); err != nil {
		return fmt.Errorf("vhostusertest: kick: %w", err)
	}
	return nil
}

// SetVringKick sends SET_VRING_KICK for vring q with fd.
func (f *Frontend) SetVringKick(q int, fd int) error {
	return f.Send(SetVringKick, Version, u64(uint64(q)), fd)
}

// Used returns vring q's used index (how many chains the backend is done with).
func (f *Frontend) Used(q int) uint16 {
	used := f.Mem[ringOff(q)+0x2000:]
	return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&used[0]))) >> 16)
}

// SendFrame puts a virtio-net header and frame into buffer slot 0 as a
// one-descriptor chain on the TX vring (1) and kicks: what the app's
// virtio-user port does to send.
func (f *Frontend) SendFrame(frame []byte) error {
	if HdrLen+len(frame) > BufSize {
		return fmt.Errorf("vhostusertest: a frame of %d bytes does not fit a buffer", len(frame))
	}
	return f.SendFrameHdr(NetHdr{}, frame)
}

// NetHdr is the virtio-net header's offload part a frontend claims.
type NetHdr struct {
	Flags      uint8 // VIRTIO_NET_HDR_F_NEEDS_CSUM, ...
	GSOType    uint8 // VIRTIO_NET_HDR_GSO_TCPV4 (1), _UDP (3), _TCPV6 (4)
	HdrLen     uint16
	GSOSize    uint16
	CsumStart  uint16
	CsumOffset uint16
}

// SendFrameHdr sends frame behind header h as one descriptor starting at
// buffer slot 0; a frame larger than a slot takes the slots after it (they
// are contiguous): a jumbo frame, or what a frontend that claims GSO sends.
func (f *Frontend) SendFrameHdr(h NetHdr, frame []byte) error {
	addr, _ := f.Buf(0)
	n := HdrLen + len(frame)
	off := int(addr - Base)
	if off+n > len(f.Mem) {
		return fmt.Errorf("vhostusertest: a frame of %d bytes does not fit guest memory", len(frame))
	}
	buf := f.Mem[off : off+n]
	clear(buf[:HdrLen])
	buf[0], buf[1] = h.Flags, h.GSOType
	binary.LittleEndian.PutUint16(buf[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(buf[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(buf[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(buf[8:], h.CsumOffset)
	copy(buf[HdrLen:], frame)
	f.SetDesc(1, 0, addr, uint32(n), 0, 0)
	return f.Post(1, 0)
}
