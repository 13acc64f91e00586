package doctor_test

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// fixture copies testdata/<name> into a fresh temporary root and returns
// it. File names in testdata escape ':' as %3A because a Go module zip
// may not contain ':' (PCI addresses are full of them); the copy
// unescapes them, so checks see the names sysfs uses. Copying also keeps
// FixIRQ tests from writing into testdata.
func fixture(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		un, err := url.PathUnescape(rel)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, un)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
	})
	if err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return dst
}
