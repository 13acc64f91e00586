package limits

import (
	"errors"
	"fmt"
	"strings"
)

// ErrIfName means a name the kernel refuses for a network interface.
var ErrIfName = errors.New("not a name the kernel accepts for an interface")

// CheckIfName applies the kernel's rule for interface names
// (net/core/dev.c, dev_valid_name): 1 to IfNameMax bytes, not "." or "..",
// no '/', ':' or white space (the kernel's isspace, which counts 0xa0 too).
// Anything else is a name: DPVS's "dpdk0.kni", "bond0.kni" and "100.kni"
// among them. Where such a name names a file, a socket or a unit, the one
// that builds the path or the unit name escapes it, not this rule.
func CheckIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrIfName)
	case len(name) > IfNameMax:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrIfName, len(name), IfNameMax)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q is a directory's", ErrIfName, name)
	case strings.ContainsAny(name, "/:"):
		return fmt.Errorf("%w: it contains '/' or ':'", ErrIfName)
	case strings.IndexFunc(name, kernelSpace) >= 0 || strings.Contains(name, "\xa0"):
		return fmt.Errorf("%w: it contains white space", ErrIfName)
	}
	return nil
}

// kernelSpace is the kernel's isspace over ASCII: space, \t, \n, \v, \f, \r.
func kernelSpace(r rune) bool {
	return r == ' ' || (r >= '\t' && r <= '\r')
}
