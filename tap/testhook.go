//go:build kbridge_testhook

package tap

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// In a kbridge built with -tags kbridge_testhook (tests only; see
// tests/vhost/fallback_test.go), KBRIDGE_TEST_REFUSE_GSO=1 makes every
// GSO write (a virtio-net header whose gso_type is not NONE) fail with
// EINVAL, as kernels that refuse some GSO shapes do (e269d79c7d35). This
// kernel takes them all, so without the hook the fallback could only be
// tested with a fake writev. A product build has neither the variable nor
// the wrapper.
func init() {
	if os.Getenv("KBRIDGE_TEST_REFUSE_GSO") == "" {
		return
	}
	write := sysWritev
	sysWritev = func(fd int, iov []unix.Iovec) unix.Errno {
		if len(iov) > 0 && iov[0].Len >= 2 && unsafe.Slice(iov[0].Base, 2)[1] != unix.VIRTIO_NET_HDR_GSO_NONE {
			return unix.EINVAL
		}
		return write(fd, iov)
	}
}
