// Package ring checks mode ring's data path end to end on real rings: the
// real kbridge binary runs as a DPDK secondary against this test process as
// the DPDK primary (package ring/ringtest), with a real TAP interface inside
// a network namespace the tests create, through the shared bed of
// tests/dpdkbed (on tests/harness). Root only.
package ring

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// env is this test binary's DPDK primary, namespace and kbridge binary.
var env *dpdkbed.Env

func TestMain(m *testing.M) { os.Exit(dpdkbed.Main(m, "kbit", &env)) }

type bed = dpdkbed.Bed

type bedOpts struct {
	queues   int
	ringSize int
	poolSize int
	yaml     string // appended to the generated configuration
	noStart  bool
}

func newBed(t *testing.T, o bedOpts) *bed {
	t.Helper()
	return env.NewBed(t, dpdkbed.Opts{Queues: o.queues, RingSize: o.ringSize, PoolSize: o.poolSize, YAML: o.yaml, NoStart: o.noStart})
}

func needRoot(t *testing.T) { t.Helper(); env.NeedRoot(t) }

func inNS(f func() error) error { return dpdkbed.InNS(env.NS, f) }

var (
	testFrame = dpdkbed.TestFrame
	onlyTest  = dpdkbed.OnlyTest
	waitUntil = dpdkbed.WaitUntil
)
