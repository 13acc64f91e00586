// Package docs holds no code: its test keeps the repository's Markdown
// honest. Every relative link must name a file that exists and, with a
// #fragment, a heading of that file; no document may cite material that
// lives outside the repository; every configuration key has its one row in
// CONFIG.md (XDP.md for the xdp section); ARCHITECTURE.md's import rules
// are the code's (imports_test.go). It reads files and asks `go list`,
// builds nothing, so it runs in a second and needs no root.
package docs

import (
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/kbridge/kbridge/config"
)

// root is the repository, one directory up from this package.
const root = ".."

// outside names what a document must not cite: notes that are not part of
// the repository, so a reader of a clone cannot follow them. The names are
// put together here so that this file does not cite them either.
var outside = []string{".." + "/shared", "DESIGN" + ".md", "TESTBED" + ".md"}

var (
	// inlineLink matches [text](target) and ![alt](target); the target
	// ends at whitespace or the closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// markdownFiles returns every .md file of the repository, relative to root,
// leaving out build output, results and test data.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "results", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Markdown files found under " + root)
	}
	return files
}

// line is one line of a Markdown file and its number, from 1.
type line struct {
	n    int
	text string
}

// eachLine calls f with every line of a Markdown text but the fences
// themselves, its number from 1, and whether it lies in a fenced block.
func eachLine(text string, f func(n int, l string, fenced bool)) {
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		f(i+1, l, in)
	}
}

// prose returns the lines of a Markdown file outside fenced code blocks,
// with inline code spans blanked out.
func prose(text string) []line {
	var out []line
	eachLine(text, func(n int, l string, fenced bool) {
		if !fenced {
			out = append(out, line{n, codeSpan.ReplaceAllString(l, "``")})
		}
	})
	return out
}

// anchors returns the fragment ids GitHub gives the headings of a Markdown
// file: lower case, punctuation other than '-' and '_' dropped, spaces as
// '-', a repeated id suffixed -1, -2, ...
func anchors(text string) map[string]bool {
	ids := make(map[string]bool)
	seen := make(map[string]int)
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		m := heading.FindStringSubmatch(l)
		if in || m == nil {
			continue
		}
		id := slug(m[2])
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func slug(title string) string {
	// Links in a heading count by their text.
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestLinksResolve(t *testing.T) {
	cache := make(map[string]map[string]bool)
	headingsOf := func(path string) (map[string]bool, error) {
		if ids, ok := cache[path]; ok {
			return ids, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range prose(string(b)) {
			n := l.n
			for _, m := range inlineLink.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				info, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, n, target, dest)
					continue
				}
				if frag == "" {
					continue
				}
				if info.IsDir() || !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %q: a #fragment into %s, which is not a Markdown file", file, n, target, dest)
					continue
				}
				ids, err := headingsOf(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !ids[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with id %q", file, n, target, dest, frag)
				}
			}
		}
	}
}

func TestNoOutsideCitations(t *testing.T) {
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			for _, s := range outside {
				if strings.Contains(l, s) {
					t.Errorf("%s:%d: cites %s, which is not in the repository", file, i+1, s)
				}
			}
		}
	}
}

// TestNoMergeConflictLeft reads every file git tracks for a merge's
// conflict markers: a merge once committed a document with both sides in
// it, and nothing else reads a document's text as text.
func TestNoMergeConflictLeft(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("no git work tree: %v", err)
	}
	start, end := strings.Repeat("<", 7)+" ", strings.Repeat(">", 7)+" "
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue // a file deleted in the work tree
		}
		for i, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, start) || strings.HasPrefix(l, end) {
				t.Errorf("%s:%d: a merge conflict's marker: %.40s", name, i+1, l)
			}
		}
	}
}

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"Mode vhost: the app side over vhost-user":                                    "mode-vhost-the-app-side-over-vhost-user",
		"The app headers, `include/kbridge/`":                                         "the-app-headers-includekbridge",
		"The reference app's `--vhost` port":                                          "the-reference-apps---vhost-port",
		"The vhost variant (`KBT_MODE=vhost`)":                                        "the-vhost-variant-kbt_modevhost",
		"Where /dev/vhost-net exists: DPDK's own kernel path (documented, not built)": "where-devvhost-net-exists-dpdks-own-kernel-path-documented-not-built",
		"`ena-wc` — ENA write-combining":                                              "ena-wc--ena-write-combining",
	} {
		if got := slug(title); got != want {
			t.Errorf("slug(%q) = %q, want %q", title, got, want)
		}
	}
}

// TestConfigKeysDocumented keeps CONFIG.md the reference of every key: each
// key kbridge reads has a row there, or, for the xdp section, in XDP.md's
// table, and no row names a key that does not exist.
func TestConfigKeysDocumented(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ref, xdpDoc := section(t, read("CONFIG.md"), "## Keys"), read("XDP.md")
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)`")
	documented := make(map[string]bool)
	for _, m := range row.FindAllStringSubmatch(ref, -1) {
		documented[m[1]] = true
	}
	keys := config.Keys()
	for _, k := range keys {
		if sub, ok := strings.CutPrefix(k, "xdp."); ok {
			if !strings.Contains(xdpDoc, "| `"+sub+"` |") {
				t.Errorf("key %s has no row in XDP.md's configuration table", k)
			}
			continue
		}
		if !documented[k] {
			t.Errorf("key %s has no row in CONFIG.md", k)
		}
	}
	for k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("CONFIG.md documents %s, which is not a configuration key", k)
		}
	}
}

// section returns the part of a Markdown text from the heading title to the
// next heading of the same level.
func section(t *testing.T, text, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n"+title+"\n")
	if !ok {
		t.Fatalf("no section %q", title)
	}
	level := title[:strings.IndexByte(title, ' ')+1]
	if i := strings.Index(rest, "\n"+level); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// maxBenchmarks bounds BENCHMARKS.md: a reference (how to run, the method,
// one committed run, the targets) fits in it; dated runs and experiments go
// to docs/runs/, where they do not crowd it out.
const maxBenchmarks = 30 << 10

var (
	issueNumber = regexp.MustCompile(`(?i)\bissues?\s+#?\d+`)
	machinePath = regexp.MustCompile(`(^|[^\w.])/(work|tmp)(/|\b)`)
)

// TestBenchmarksStaysAShortReference keeps BENCHMARKS.md a reference, not a
// lab notebook: under 30 KiB, no issue numbers (a reader of a clone has no
// tracker), no paths of one machine's checkouts or scratch files.
func TestBenchmarksStaysAShortReference(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= maxBenchmarks {
		t.Errorf("docs/BENCHMARKS.md is %d bytes, %d or more: move dated runs to docs/runs/", len(b), maxBenchmarks)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if m := issueNumber.FindString(l); m != "" {
			t.Errorf("docs/BENCHMARKS.md:%d: names %q; say what was measured instead", i+1, m)
		}
		if machinePath.MatchString(l) {
			t.Errorf("docs/BENCHMARKS.md:%d: a path under /work or /tmp: %s", i+1, l)
		}
	}
}

// TestEveryRunIsListed keeps docs/runs/README.md the index of the dated
// runs: every file there is linked from it.
func TestEveryRunIsListed(t *testing.T) {
	dir := filepath.Join(root, "docs", "runs")
	index, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) < 2 {
		t.Fatalf("docs/runs holds %d Markdown files; want the index and at least one run", len(runs))
	}
	for _, run := range runs {
		name := filepath.Base(run)
		if name == "README.md" {
			continue
		}
		if !strings.Contains(string(index), "]("+name+")") && !strings.Contains(string(index), "]("+name+"#") {
			t.Errorf("docs/runs/%s is not listed in docs/runs/README.md", name)
		}
	}
}

// readDoc returns a file of the repository as text.
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// standingPages are the pages that describe kbridge as it is: README.md,
// tests/README.md and docs/*.md. The dated runs under docs/runs/ are not
// among them: they keep what was true, and where, when they were written.
func standingPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{"README.md", filepath.Join("tests", "README.md")}
	for _, d := range docs {
		pages = append(pages, filepath.Join("docs", filepath.Base(d)))
	}
	return pages
}

// maxArchitecture bounds ARCHITECTURE.md: the parts, their contracts and
// rules, the app header in short (with who allocates the app's mbufs), the
// lifecycle, the trust model and the layout fit in it (the fault table is
// FAULTS.md); history goes to docs/runs/ or stays in git.
const maxArchitecture = 25 << 10

func TestArchitectureStaysAShortReference(t *testing.T) {
	text := readDoc(t, "docs/ARCHITECTURE.md")
	if len(text) >= maxArchitecture {
		t.Errorf("docs/ARCHITECTURE.md is %d bytes, %d or more: link the home of a fact instead of restating it, move history to docs/runs/", len(text), maxArchitecture)
	}
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "Before,") || strings.Contains(l, "| Before,") {
			t.Errorf("docs/ARCHITECTURE.md:%d: history (%q); say what the code does now", i+1, "Before,")
		}
	}
}

// maxReadme keeps README.md the front page: what kbridge is, the two
// set-up commands, how an app uses it. Detail has its page under docs/.
const maxReadme = 16000

func TestReadmeStaysAFrontPage(t *testing.T) {
	if text := readDoc(t, "README.md"); len(text) >= maxReadme {
		t.Errorf("README.md is %d bytes, %d or more: move detail to its page under docs/ and link it", len(text), maxReadme)
	}
}

var (
	// A bare "(27)" after a word, or "#27"; man-page sections such as
	// bpf(2) touch the word and are left alone, and code spans are blanked
	// before the match, so quoted log lines do not count.
	issueRef   = regexp.MustCompile(`(^|\s)\(#?\d+\)|(^|[\s(])#\d+\b`)
	homePath   = regexp.MustCompile(`(^|[^\w.~-])/(home|root)(/|\b)`)
	scratchDir = regexp.MustCompile(`(^|[^\w.~-])/tmp/ci`)
)

// TestStandingPagesNameNoIssuesOrMachinePaths keeps the standing pages
// readable from a clone: no issue numbers (a reader has no tracker: say what
// changed instead) and no paths of one machine's checkouts, homes or scratch
// directories (a reader's machine has other ones).
func TestStandingPagesNameNoIssuesOrMachinePaths(t *testing.T) {
	for _, page := range standingPages(t) {
		text := readDoc(t, page)
		for _, l := range prose(text) {
			if m := issueNumber.FindString(l.text); m != "" {
				t.Errorf("%s:%d: names %q; say what changed instead", page, l.n, m)
			}
			if m := issueRef.FindString(l.text); m != "" {
				t.Errorf("%s:%d: %q reads as an issue number", page, l.n, strings.TrimSpace(m))
			}
		}
		for i, l := range strings.Split(text, "\n") {
			if machinePath.MatchString(l) || homePath.MatchString(l) || scratchDir.MatchString(l) {
				t.Errorf("%s:%d: a path of one machine (/work, /tmp, /home, /root): %s", page, i+1, l)
			}
		}
	}
}

// TestLayoutNamesWhatExists keeps ARCHITECTURE.md's Layout the map of the
// repository: every top-level directory that holds tracked files and every
// docs/*.md has a line of its own, and every path the section names exists.
func TestLayoutNamesWhatExists(t *testing.T) {
	layout := section(t, readDoc(t, "docs/ARCHITECTURE.md"), "## Layout")
	var lines []string
	eachLine(layout, func(_ int, l string, fenced bool) {
		if fenced && strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	})
	if len(lines) == 0 {
		t.Fatal("docs/ARCHITECTURE.md's Layout has no fenced list")
	}
	listed := make(map[string]bool)
	pathLike := regexp.MustCompile(`^\.?[a-z][\w.-]*(/[\w.-]+)*/?$`)
	for _, l := range lines {
		fields := strings.Fields(l)
		listed[strings.TrimSuffix(fields[0], "/")] = true
		for i, f := range fields {
			f = strings.TrimRight(f, ";:,")
			if i > 0 && (!strings.Contains(f, "/") || !pathLike.MatchString(f)) {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("Layout names %s, which does not exist", f)
			}
		}
	}
	for _, dir := range trackedTopDirs(t) {
		found := false
		for p := range listed {
			if p == dir || strings.HasPrefix(p, dir+"/") {
				found = true
			}
		}
		if !found {
			t.Errorf("Layout has no line for the top-level directory %s/", dir)
		}
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if name := "docs/" + filepath.Base(d); !listed[name] {
			t.Errorf("Layout has no line for %s", name)
		}
	}
}

// trackedTopDirs returns the top-level directories that hold files git
// tracks; without git (an exported tree) every directory but build output
// counts.
func trackedTopDirs(t *testing.T) []string {
	t.Helper()
	seen := make(map[string]bool)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if dir, _, ok := strings.Cut(f, "/"); ok {
				seen[dir] = true
			}
		}
	} else {
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			switch e.Name() {
			case ".git", "bin", "results":
				continue
			}
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
	}
	dirs := slices.Sorted(maps.Keys(seen))
	if len(dirs) == 0 {
		t.Fatal("no top-level directories found")
	}
	return dirs
}

// TestDefaultsHaveOneHome keeps CONFIG.md the one home of the defaults.
// ARCHITECTURE.md states none: no sentence or table cell of it (within one
// line) that names a key says "default". README.md may state one, and then
// it is CONFIG.md's: where a sentence or cell names a key and says
// "default", or follows a key with a value in parentheses
// ("`requests.timeout` (3 s)"), the value given (`key: value`, the
// parenthesis, else the sentence) holds the default of CONFIG.md's Keys
// table.
func TestDefaultsHaveOneHome(t *testing.T) {
	defaults := configDefaults(t)
	keyed := regexp.MustCompile("`([a-z_]+(?:\\.[a-z_]+)*)(?::\\s*([^`]*))?`(?:\\s*\\(\\s*([\\d\"`][^)]*)\\))?")
	defaultWord := regexp.MustCompile(`(?i)\bdefaults?\b`)
	for _, page := range []string{"docs/ARCHITECTURE.md", "README.md"} {
		// Not prose: it blanks the code spans the keys are in.
		eachLine(readDoc(t, page), func(n int, line string, fenced bool) {
			if fenced {
				return
			}
			for _, part := range clauses(line) {
				says := defaultWord.MatchString(part)
				for _, m := range keyed.FindAllStringSubmatch(part, -1) {
					want, ok := defaults[m[1]]
					if !ok || !says && m[3] == "" {
						continue
					}
					if page == "docs/ARCHITECTURE.md" {
						t.Errorf("%s:%d: states a default of %s; link CONFIG.md instead: %s", page, n, m[1], part)
						continue
					}
					stated := m[2] + m[3]
					if stated == "" {
						stated = part
					}
					if !strings.Contains(squash(stated), squash(want)) {
						t.Errorf("%s:%d: %s's default reads %q here, %q in CONFIG.md", page, n, m[1], strings.TrimSpace(stated), want)
					}
				}
			}
		})
	}
}

// clauses splits a line into table cells, and prose into sentences.
func clauses(l string) []string {
	var out []string
	for _, cell := range strings.Split(l, "|") {
		out = append(out, strings.Split(cell, ". ")...)
	}
	return out
}

// squash drops spaces and quotes, so "3 s" reads as "3s".
func squash(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '"' || r == '`' {
			return -1
		}
		return r
	}, s)
}

// configDefaults reads CONFIG.md's Keys table: each key and the first code
// span of its default cell (or the cell's text when it has none).
func configDefaults(t *testing.T) map[string]string {
	t.Helper()
	keys := section(t, readDoc(t, "docs/CONFIG.md"), "## Keys")
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| ([^|]*) \\|")
	span := regexp.MustCompile("`([^`]*)`")
	defaults := make(map[string]string)
	for _, m := range row.FindAllStringSubmatch(keys, -1) {
		cell := strings.TrimSpace(m[2])
		if s := span.FindStringSubmatch(cell); s != nil {
			cell = s[1]
		}
		defaults[m[1]] = cell
	}
	if len(defaults) < 10 {
		t.Fatalf("read %d defaults from CONFIG.md's Keys table; its rows changed shape", len(defaults))
	}
	return defaults
}

// TestCitedTestsExist keeps the fault table (FAULTS.md) and ARCHITECTURE.md
// honest: every test they name is a test function of the repository.
func TestCitedTestsExist(t *testing.T) {
	tests := make(map[string]bool)
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			tests[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cited := regexp.MustCompile("`(Test[A-Z]\\w*)`")
	for _, page := range []string{"docs/ARCHITECTURE.md", "docs/FAULTS.md"} {
		for i, l := range strings.Split(readDoc(t, page), "\n") {
			for _, m := range cited.FindAllStringSubmatch(l, -1) {
				if !tests[m[1]] {
					t.Errorf("%s:%d: cites %s, which is no test function", page, i+1, m[1])
				}
			}
		}
	}
}

// TestReadmeNamesTheToolchainOfGoMod keeps README.md's GOTOOLCHAIN, the one
// a go command run by hand needs, the toolchain line of go.mod (its home).
func TestReadmeNamesTheToolchainOfGoMod(t *testing.T) {
	var want string
	for _, l := range strings.Split(readDoc(t, "go.mod"), "\n") {
		if v, ok := strings.CutPrefix(l, "toolchain "); ok {
			want = strings.TrimSpace(v)
		}
	}
	if want == "" {
		t.Fatal("go.mod has no toolchain line")
	}
	named := regexp.MustCompile(`GOTOOLCHAIN=(go[0-9.]+)`).FindAllStringSubmatch(readDoc(t, "README.md"), -1)
	if len(named) == 0 {
		t.Fatal("README.md names no GOTOOLCHAIN=go1.N.M for a go command run by hand")
	}
	for _, m := range named {
		if m[1] != want {
			t.Errorf("README.md says GOTOOLCHAIN=%s, go.mod's toolchain is %s", m[1], want)
		}
	}
}
