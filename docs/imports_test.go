package docs

import (
	"bytes"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// module is the import path every package of this repository starts with.
const module = "github.com/kbridge/kbridge/"

// TestImportsAreTheArchitecturesRules holds ARCHITECTURE.md's Dependencies
// block to the code: for every package outside tests/ and docs/, the
// packages of this module it imports (tests aside) are exactly those its
// line names, and every such package has a line. A new arrow, or one that
// went, fails here until the page says so. It asks `go list`, which reads
// the sources and builds nothing.
func TestImportsAreTheArchitecturesRules(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the packages' imports")
	}
	rules := importRules(t, section(t, readDoc(t, "docs/ARCHITECTURE.md"), "## Dependencies"))
	cmd := exec.Command(goCmd, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(l)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok || pkg == "docs" || strings.HasPrefix(pkg, "tests/") {
			continue
		}
		var code []string
		for _, imp := range fields[1:] {
			if p, ok := strings.CutPrefix(imp, module); ok {
				code = append(code, p)
			}
		}
		page, ok := rules.of(pkg)
		if !ok {
			t.Errorf("package %s has no line in ARCHITECTURE.md's Dependencies (it imports %v): add one", pkg, code)
			continue
		}
		for _, p := range code {
			if !slices.Contains(page, p) {
				t.Errorf("%s imports %s, which ARCHITECTURE.md's Dependencies does not allow it: change the code or the page", pkg, p)
			}
		}
		for _, p := range page {
			if !slices.Contains(code, p) {
				t.Errorf("ARCHITECTURE.md's Dependencies has %s import %s, which the code does not: mend the page", pkg, p)
			}
		}
	}
}

// rules maps a package, or a pattern ending in /* for every package below
// a directory, to the packages of this module it imports.
type rules map[string][]string

// of returns the imports the page allows pkg: its own line's, else the
// line of a pattern that covers it.
func (r rules) of(pkg string) ([]string, bool) {
	if imps, ok := r[pkg]; ok {
		return imps, true
	}
	for pat, imps := range r {
		if dir, ok := strings.CutSuffix(pat, "/*"); ok && strings.HasPrefix(pkg, dir+"/") {
			return imps, true
		}
	}
	return nil, false
}

// importRules reads the fenced block of the Dependencies section, one
// rule a line: "a, b ─▶ c, internal/{d,e}" (a and b import c, internal/d
// and internal/e), or "a, b: nothing of kbridge's".
func importRules(t *testing.T, text string) rules {
	t.Helper()
	r := make(rules)
	eachLine(text, func(n int, l string, fenced bool) {
		if !fenced || strings.TrimSpace(l) == "" {
			return
		}
		var lhs, rhs string
		var imps []string
		if a, b, ok := strings.Cut(l, "─▶"); ok {
			lhs, rhs = a, b
			imps = expand(rhs)
		} else if a, ok := strings.CutSuffix(strings.TrimSpace(l), ": nothing of kbridge's"); ok {
			lhs = a
		} else {
			t.Fatalf("ARCHITECTURE.md's Dependencies, line %d: %q is neither \"a ─▶ b, c\" nor \"a: nothing of kbridge's\"", n, l)
		}
		for _, pkg := range expand(lhs) {
			if _, dup := r[pkg]; dup {
				t.Errorf("ARCHITECTURE.md's Dependencies names %s twice", pkg)
			}
			r[pkg] = imps
		}
	})
	if len(r) == 0 {
		t.Fatal("ARCHITECTURE.md's Dependencies has no fenced block of rules")
	}
	return r
}

// expand splits a comma-separated list whose items may hold one brace
// group: "a, internal/{b,c}" is a, internal/b and internal/c.
func expand(list string) []string {
	var out []string
	depth, start := 0, 0
	item := func(s string) {
		s = strings.TrimSpace(s)
		pre, rest, ok := strings.Cut(s, "{")
		if !ok {
			if s != "" {
				out = append(out, s)
			}
			return
		}
		group, post, _ := strings.Cut(rest, "}")
		for _, g := range strings.Split(group, ",") {
			out = append(out, path.Clean(pre+strings.TrimSpace(g)+post))
		}
	}
	for i, c := range list {
		switch c {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				item(list[start:i])
				start = i + 1
			}
		}
	}
	item(list[start:])
	return out
}

// cgoHomes are the files ARCHITECTURE.md names as the homes of the #cgo
// directives, one a package (and a build tag's additions beside it).
var cgoHomes = []string{"ring/cgo.go", "ring/cgo_testhook.go", "ring/ringtest/cgo.go", "include/kbridge/abiprobe/cgo.go", "doctor/cgo.go"}

// TestCgoDirectivesHaveOneHomeAPackage keeps every #cgo line of the
// repository's Go files in the files ARCHITECTURE.md lists, so that a
// package's C is built with one set of flags, found in one place.
func TestCgoDirectivesHaveOneHomeAPackage(t *testing.T) {
	arch := readDoc(t, "docs/ARCHITECTURE.md")
	for _, f := range cgoHomes {
		if !strings.Contains(arch, "`"+f+"`") {
			t.Errorf("ARCHITECTURE.md does not list %s among the #cgo homes", f)
		}
	}
	// Files git does not track yet count too (--untracked), ignored ones
	// (bin/) not; exit status 1 is "none found".
	out, err := exec.Command("git", "-C", root, "grep", "--untracked", "-l", "-e", "^#cgo ", "--", "*.go").Output()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		t.Fatal("no #cgo directive found: ring's at least should be")
	} else if err != nil {
		t.Skipf("git grep: %v (not a git checkout?)", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if !slices.Contains(cgoHomes, f) {
			t.Errorf("%s has #cgo directives: move them to its package's cgo.go (and list a new home in ARCHITECTURE.md)", f)
		}
	}
}
