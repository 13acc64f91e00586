package limits

import (
	"errors"
	"testing"
)

func TestCheckIfNameFollowsTheKernel(t *testing.T) {
	for _, good := range []string{"kb0", "vEth0", "dpdk0.kni", "bond0.kni", "100.kni", "a", "fifteen-chars-x", "...", "é", "a\"b", "a\\b", "a@b"} {
		if err := CheckIfName(good); err != nil {
			t.Errorf("CheckIfName(%q): %v, the kernel accepts it", good, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a:b", "a b", "a\tb", "a\vb", "a\rb", "a\xa0b", "sixteen-chars-xx"} {
		if err := CheckIfName(bad); !errors.Is(err, ErrIfName) {
			t.Errorf("CheckIfName(%q) = %v, want ErrIfName", bad, err)
		}
	}
}
