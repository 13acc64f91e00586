package ring

import (
	"os"
	"sync"
	"testing"
)

var (
	ealOnce sync.Once
	ealErr  error // no EAL here: skip
	poolErr error // an EAL without kbridge's pool: fail
)

// testVhostEAL starts kbridge's own EAL and a pool of 1024 mbufs of 2048 bytes,
// once per test binary (an EAL starts once per process), or skips: root
// and hugepages only.
func testVhostEAL(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 || testing.Short() {
		t.Skip("needs root and hugepages for kbridge's own EAL")
	}
	ealOnce.Do(func() {
		ealErr = InitVhostEAL(VhostEALConfig{CPU: 0, Args: []string{"--log-level=lib.eal:error", "-m", "64"}})
		if ealErr == nil {
			poolErr = CreateVhostPool(1024, 2048)
		}
	})
	if ealErr != nil {
		t.Skipf("no EAL here: %v", ealErr)
	}
	if poolErr != nil {
		t.Fatal(poolErr)
	}
}

// TestVhostHotPathNoDevice runs the app side with kbridge's own EAL and pool but
// no frontend: bursts move nothing, allocate nothing in Go, and every mbuf
// of a Put comes back to the pool. Root only (hugepages).
func TestVhostHotPathNoDevice(t *testing.T) {
	testVhostEAL(t)
	q, err := NewVhostQueue(0, 32, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	in, err := NewVhostIn(0, 32, 1518)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	lens := make([]int, 32)
	for i := range lens {
		lens[i] = 60 + i
	}
	allocs := testing.AllocsPerRun(200, func() {
		if n := q.Next(); n != 0 {
			t.Fatalf("Next without a frontend = %d", n)
		}
		if q.PrepareToPark() != 0 {
			t.Fatal("pending without a frontend")
		}
		q.Unpark()
		res := in.Put(lens)
		if res.Queued != 0 || res.RingFull != len(lens) {
			t.Fatalf("Put without a frontend = %+v", res)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per burst", allocs)
	}
	if n := VhostPoolInUse(); n != 0 {
		t.Errorf("%d mbufs not freed", n)
	}
}
