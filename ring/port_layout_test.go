package ring

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// kbridge refuses a control block whose layout differs from its own in any
// item, naming the item and both values: a DPDK built with other options
// (enable_iova_as_pa=false moves rte_mbuf's next) is the same version.
func TestLayoutCheckNamesTheFirstDifference(t *testing.T) {
	mine, names := layoutMine()
	if err := checkLayout(mine); err != nil {
		t.Fatalf("kbridge's own layout refused: %v", err)
	}
	if len(mine) < 20 || names[0] != "sizeof(struct rte_mbuf)" {
		t.Fatalf("layout of %d items, first %q", len(mine), names[0])
	}
	for i, name := range names {
		app := append([]uint32(nil), mine...)
		app[i] += 8
		err := checkLayout(app)
		want := fmt.Sprintf("%s is %d in the app's build, %d in kbridge's", name, app[i], mine[i])
		if !errors.Is(err, ErrLayoutMismatch) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s off by 8: %v, want %q", name, err, want)
		}
	}
	if err := checkLayout(mine[:len(mine)-1]); !errors.Is(err, ErrLayoutMismatch) || !strings.Contains(err.Error(), "items") {
		t.Errorf("a layout of one item less: %v", err)
	}
}
