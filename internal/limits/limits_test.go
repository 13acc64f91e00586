package limits

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The C header and the Go constant cannot drift apart: the header is the
// app's side of the same limit, compiled into the DPDK application.
func TestPortNameMaxMatchesHeader(t *testing.T) {
	h, err := os.ReadFile("../../include/kbridge/kbridge_ring.h")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define\s+KBRIDGE_NAME_MAX\s+(\d+)\s*$`).FindSubmatch(h)
	if m == nil {
		t.Fatal("kbridge_ring.h: no #define KBRIDGE_NAME_MAX <number>")
	}
	n, _ := strconv.Atoi(string(m[1]))
	if n != PortNameMax {
		t.Errorf("KBRIDGE_NAME_MAX is %d in kbridge_ring.h, PortNameMax is %d", n, PortNameMax)
	}
	if PortNameMax > IfNameMax {
		t.Errorf("PortNameMax %d exceeds IfNameMax %d: a port name must be an interface name", PortNameMax, IfNameMax)
	}
}

func TestIfNameMax(t *testing.T) {
	if IfNameMax != unix.IFNAMSIZ-1 {
		t.Errorf("IfNameMax %d, IFNAMSIZ-1 is %d", IfNameMax, unix.IFNAMSIZ-1)
	}
}

// The largest frame MaxMTU allows, with every header and the slack, fits
// one buffer; one byte more of MTU would not.
func TestMaxMTUFitsBuffer(t *testing.T) {
	frame := func(mtu int) int { return VnetHeaderLen + mtu + EthHeaderLen + VLANTagLen + FrameSlack }
	if frame(MaxMTU) != FrameBuffer {
		t.Errorf("MaxMTU %d: frame %d, buffer %d", MaxMTU, frame(MaxMTU), FrameBuffer)
	}
	if MaxMTU != 65444 || MaxMTU > MaxKernelMTU || MinMTU >= MaxMTU {
		t.Errorf("MinMTU %d MaxMTU %d MaxKernelMTU %d", MinMTU, MaxMTU, MaxKernelMTU)
	}
}
