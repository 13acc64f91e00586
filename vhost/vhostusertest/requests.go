package vhostusertest

import (
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Requests a virtio-user port never sends to kbridge (the dirty log,
// inflight tracking, IOTLB, the backend channel, config space, crypto,
// postcopy, status, memory slots): what a hostile frontend sends instead.
const (
	ResetOwner           = 4
	SetLogBase           = 6
	SetLogFd             = 7
	GetVringBase         = 11
	SetVringErr          = 14
	GetProtocolFeatures  = 15
	SetProtocolFeatures  = 16
	GetQueueNum          = 17
	SetVringEnable       = 18
	SendRARP             = 19
	NetSetMTU            = 20
	SetBackendReqFd      = 21
	IOTLBMsg             = 22
	GetConfig            = 24
	SetConfig            = 25
	CryptoCreateSess     = 26
	CryptoCloseSess      = 27
	PostcopyAdvise       = 28
	PostcopyListen       = 29
	PostcopyEnd          = 30
	GetInflightFd        = 31
	SetInflightFd        = 32
	GetMaxMemSlots       = 36
	AddMemReg            = 37
	RemMemReg            = 38
	SetStatus            = 39
	GetStatus            = 40
	FeatureLogAll        = 1 << 26 // VHOST_F_LOG_ALL
	FeatureProtocolFeats = 1 << 30 // VHOST_USER_F_PROTOCOL_FEATURES
)

// Call sends req and returns the backend's reply payload.
func (f *Frontend) Call(req uint32, payload []byte, fds ...int) ([]byte, error) {
	if err := f.Send(req, Version, payload, fds...); err != nil {
		return nil, err
	}
	return f.recv(req, 5*time.Second)
}

// GetProtocolFeatures asks for the backend's protocol features.
func (f *Frontend) GetProtocolFeatures() (uint64, error) {
	p, err := f.Call(GetProtocolFeatures, nil)
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("vhostusertest: GET_PROTOCOL_FEATURES reply of %d bytes", len(p))
	}
	return binary.LittleEndian.Uint64(p), nil
}

// Memfd returns a new memfd of size bytes (0: an empty one, whose first
// touch through a mapping is a SIGBUS), closed with the test's cleanup by
// the caller.
func Memfd(size int64) (int, error) {
	fd, err := unix.MemfdCreate("vhostusertest-hostile", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("vhostusertest: memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("vhostusertest: ftruncate: %w", err)
	}
	return fd, nil
}

// U64s lays out vs as a little-endian payload.
func U64s(vs ...uint64) []byte {
	var p []byte
	for _, v := range vs {
		p = binary.LittleEndian.AppendUint64(p, v)
	}
	return p
}
