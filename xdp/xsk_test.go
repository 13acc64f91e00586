package xdp

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xskSocket is a minimal AF_XDP receiver (copy mode, RX only), enough to
// prove that fast-path frames reach a socket through xsks_map. It plays the
// part of DPDK's net_af_xdp.
type xskSocket struct {
	fd    int
	umem  []byte
	fill  []byte
	rx    []byte
	frP   *uint32
	frD   []uint64
	rxP   *uint32
	rxC   *uint32
	rxD   []unix.XDPDesc
	frPos uint32
}

const (
	xskFrameSize = 2048
	xskRingSize  = 64 // also the number of frames
)

func sockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

// openXSK must run in the namespace of ifindex.
func openXSK(ifindex, queue int) (s *xskSocket, err error) {
	s = &xskSocket{fd: -1}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if s.umem, err = unix.Mmap(-1, 0, xskFrameSize*xskRingSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return nil, fmt.Errorf("umem: %w", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: xskFrameSize}
	if err := sockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("XDP_UMEM_REG: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, opt, xskRingSize); err != nil {
			return nil, fmt.Errorf("ring size %d: %w", opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	n := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", e)
	}
	rw, shared := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	if s.fill, err = unix.Mmap(s.fd, unix.XDP_UMEM_PGOFF_FILL_RING, int(off.Fr.Desc)+xskRingSize*8, rw, shared); err != nil {
		return nil, fmt.Errorf("mmap fill ring: %w", err)
	}
	if s.rx, err = unix.Mmap(s.fd, unix.XDP_PGOFF_RX_RING, int(off.Rx.Desc)+xskRingSize*int(unsafe.Sizeof(unix.XDPDesc{})), rw, shared); err != nil {
		return nil, fmt.Errorf("mmap rx ring: %w", err)
	}
	s.frP = (*uint32)(unsafe.Pointer(&s.fill[off.Fr.Producer]))
	s.frD = unsafe.Slice((*uint64)(unsafe.Pointer(&s.fill[off.Fr.Desc])), xskRingSize)
	s.rxP = (*uint32)(unsafe.Pointer(&s.rx[off.Rx.Producer]))
	s.rxC = (*uint32)(unsafe.Pointer(&s.rx[off.Rx.Consumer]))
	s.rxD = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&s.rx[off.Rx.Desc])), xskRingSize)

	// Hand every frame to the kernel before binding.
	for i := range uint32(xskRingSize) {
		s.give(uint64(i) * xskFrameSize)
	}
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	if err := unix.Bind(s.fd, sa); err != nil {
		return nil, fmt.Errorf("bind queue %d: %w", queue, err)
	}
	return s, nil
}

func (s *xskSocket) give(addr uint64) {
	s.frD[s.frPos%xskRingSize] = addr
	s.frPos++
	atomic.StoreUint32(s.frP, s.frPos)
}

// receive collects frames until timeout passes without a new one.
func (s *xskSocket) receive(idle time.Duration) [][]byte {
	var got [][]byte
	for {
		fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(idle/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return got
		}
		cons, prod := atomic.LoadUint32(s.rxC), atomic.LoadUint32(s.rxP)
		for ; cons != prod; cons++ {
			d := s.rxD[cons%xskRingSize]
			got = append(got, append([]byte(nil), s.umem[d.Addr:d.Addr+uint64(d.Len)]...))
			s.give(d.Addr &^ (xskFrameSize - 1))
		}
		atomic.StoreUint32(s.rxC, cons)
	}
}

func (s *xskSocket) Close() {
	for _, m := range [][]byte{s.rx, s.fill, s.umem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
	}
}
